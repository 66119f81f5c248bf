import FoundationEssentials
import KeychainVocabulary
import ToolSupport

/// `--json`: password items as JSON objects whose field names are a stable interface for scripts
/// (README, "Scriptable output"). Every field of an item's class is present, null when the item
/// lacks it, so `jq .label` never depends on what happened to be stored.
///
/// - Important: the secret is a field only when the caller asked for it (`-w`, `-g`, `dump-keychain
///   -d`): ``object(_:keychain:secret:)`` with a nil secret never holds it.
enum ItemJSON {
    /// One item. Text attributes are strings; an attribute whose bytes are not UTF-8 (SecItem code
    /// may store Data) is null under its name and given as base64 under the name plus `Base64`
    /// (`"account": null, "accountBase64": "/wA="`); the secret likewise (`password`,
    /// `passwordBase64`).
    static func object(_ item: ShownItem, keychain: String, secret: Data?) -> [String: JSONValue] {
        var object: [String: JSONValue] = ["class": .string(item.classCode), "keychain": .string(keychain)]
        func text(_ key: String, _ tag: FourCharacterCode) {
            put(key, item.bytes(tag), into: &object)
        }
        text("account", AttributeTag.account)
        text("label", AttributeTag.label)
        text("comment", AttributeTag.comment)
        text("description", AttributeTag.description)
        // No access group is null, as on Apple platforms an absent kSecAttrAccessGroup.
        put("accessGroup", item.bytes(AttributeTag.accessGroup).flatMap { $0.isEmpty ? nil : $0 }, into: &object)
        object["created"] = item.date(AttributeTag.creationDate).map { .string(iso8601($0)) } ?? .null
        object["modified"] = item.date(AttributeTag.modificationDate).map { .string(iso8601($0)) } ?? .null
        if item.itemClass == .internetPassword {
            text("server", AttributeTag.server)
            text("protocol", AttributeTag.protocol)
            object["port"] = .integer(Int(item.port))
            text("path", AttributeTag.path)
            text("authenticationType", AttributeTag.authenticationType)
            text("securityDomain", AttributeTag.securityDomain)
        } else {
            text("service", AttributeTag.service)
            text("generic", AttributeTag.generic)
        }
        if let secret { put("password", Array(secret), into: &object) }
        return object
    }

    /// The document: keys sorted, two-space indentation, slashes unescaped (the layout Foundation's
    /// JSONSerialization gave, which scripts may have come to rely on); one trailing newline
    /// comes from the caller's `print`.
    static func text(_ document: JSONValue) -> String {
        var text = ""
        document.write(into: &text, indentation: "")
        return text
    }

    /// `2026-01-31T12:00:00Z`: ISO 8601 in UTC, whole seconds.
    static func iso8601(_ date: Date) -> String {
        date.formatted(Date.ISO8601FormatStyle(timeZone: .gmt))
    }

    private static func put(_ key: String, _ bytes: [UInt8]?, into object: inout [String: JSONValue]) {
        guard let bytes else {
            object[key] = .null
            return
        }
        if let text = String(validating: bytes, as: UTF8.self) {
            object[key] = .string(text)
        } else {
            object[key] = .null
            object[key + "Base64"] = .string(Data(bytes).base64EncodedString())
        }
    }
}

/// What ``ItemJSON`` writes: strings, integers, nulls, objects and arrays.
enum JSONValue {
    case string(String)
    case integer(Int)
    case null
    case object([String: JSONValue])
    case array([JSONValue])

    /// Pretty-printed: objects' keys sorted ignoring case, as JSONSerialization's `.sortedKeys` did.
    func write(into text: inout String, indentation: String) {
        switch self {
        case .string(let string): Self.quote(string, into: &text)
        case .integer(let integer): text += String(integer)
        case .null: text += "null"
        case .object(let members):
            let inner = indentation + "  "
            let keys = members.keys.sorted { lhs, rhs in
                let (left, right) = (lhs.lowercased(), rhs.lowercased())
                return left == right ? lhs < rhs : left < right
            }
            text += "{\n"
            for (index, key) in keys.enumerated() {
                text += inner
                Self.quote(key, into: &text)
                text += " : "
                members[key]?.write(into: &text, indentation: inner)
                text += index == keys.count - 1 ? "\n" : ",\n"
            }
            if keys.isEmpty { text += "\n" }
            text += indentation + "}"
        case .array(let elements):
            let inner = indentation + "  "
            text += "[\n"
            for (index, element) in elements.enumerated() {
                text += inner
                element.write(into: &text, indentation: inner)
                text += index == elements.count - 1 ? "\n" : ",\n"
            }
            if elements.isEmpty { text += "\n" }
            text += indentation + "]"
        }
    }

    /// A JSON string: quote, backslash and control characters escaped, the rest as it is.
    private static func quote(_ string: String, into text: inout String) {
        text += "\""
        for scalar in string.unicodeScalars {
            switch scalar {
            case "\"": text += "\\\""
            case "\\": text += "\\\\"
            case "\n": text += "\\n"
            case "\r": text += "\\r"
            case "\t": text += "\\t"
            case "\u{08}": text += "\\b"
            case "\u{0C}": text += "\\f"
            case let control where control.value < 0x20:
                let hex = String(control.value, radix: 16)
                text += "\\u" + String(repeating: "0", count: 4 - hex.count) + hex
            default: text.unicodeScalars.append(scalar)
            }
        }
        text += "\""
    }
}
