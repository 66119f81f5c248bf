/// The object paths the daemon serves, and the names they carry.
///
/// `/org/freedesktop/secrets` (the service), `…/collection/<c>` and `…/collection/<c>/<item>`,
/// `…/aliases/<alias>` (the collection the alias names, as clients hard-code
/// `…/aliases/default`), `…/session/<n>` and `…/prompt/<n>`.
enum ObjectPaths {
    static let service = "/org/freedesktop/secrets"
    static let collectionPrefix = service + "/collection/"
    static let aliasPrefix = service + "/aliases/"
    static let sessionPrefix = service + "/session/"
    static let promptPrefix = service + "/prompt/"
    /// "No object": what a method returns for "no prompt needed" or "no such alias".
    static let none = "/"

    static func collection(_ id: String) -> String { collectionPrefix + id }
    static func item(_ id: String, in collectionID: String) -> String { collectionPrefix + collectionID + "/" + id }

    /// A store name as one path element ([A-Za-z0-9_]): letters and digits as they are, every other
    /// byte as `_` and two hex digits.
    static func element(for name: String) -> String {
        var element = ""
        for byte in name.utf8 {
            switch byte {
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
                UInt8(ascii: "0")...UInt8(ascii: "9"):
                element.append(Character(Unicode.Scalar(byte)))
            default:
                let digits = Array("0123456789abcdef")
                element += "_" + String(digits[Int(byte >> 4)]) + String(digits[Int(byte & 0xF)])
            }
        }
        return element
    }

    /// What a path under the service names.
    enum Target: Equatable {
        case service
        /// A collection, by its path element or (`alias`) by an alias.
        case collection(String, alias: Bool)
        case item(String, collection: String, alias: Bool)
        case session(String)
        case prompt(String)
        /// `…/collection`, `…/aliases`, `…/session` or `…/prompt`: a node with children only.
        case directory(String)
        case unknown
    }

    static func target(of path: String) -> Target {
        if path == service { return .service }
        for directory in ["collection", "aliases", "session", "prompt"] where path == service + "/" + directory {
            return .directory(directory)
        }
        for (prefix, alias) in [(collectionPrefix, false), (aliasPrefix, true)] where path.hasPrefix(prefix) {
            let parts = path.dropFirst(prefix.count).split(separator: "/", omittingEmptySubsequences: false)
            switch parts.count {
            case 1 where !parts[0].isEmpty: return .collection(String(parts[0]), alias: alias)
            case 2 where !parts[0].isEmpty && !parts[1].isEmpty:
                return .item(String(parts[1]), collection: String(parts[0]), alias: alias)
            default: return .unknown
            }
        }
        if path.hasPrefix(sessionPrefix) { return .session(path) }
        if path.hasPrefix(promptPrefix) { return .prompt(path) }
        return .unknown
    }
}
