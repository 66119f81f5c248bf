import Foundation
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
    static func object(_ item: ShownItem, keychain: String, secret: Data?) -> [String: Any] {
        var object: [String: Any] = ["class": item.classCode, "keychain": keychain]
        func text(_ key: String, _ tag: FourCharacterCode) {
            put(key, item.bytes(tag), into: &object)
        }
        text("account", AttributeTag.account)
        text("label", AttributeTag.label)
        text("comment", AttributeTag.comment)
        text("description", AttributeTag.description)
        // No access group is null, as on Apple platforms an absent kSecAttrAccessGroup.
        put("accessGroup", item.bytes(AttributeTag.accessGroup).flatMap { $0.isEmpty ? nil : $0 }, into: &object)
        object["created"] = item.date(AttributeTag.creationDate).map(iso8601) ?? NSNull()
        object["modified"] = item.date(AttributeTag.modificationDate).map(iso8601) ?? NSNull()
        if item.itemClass == .internetPassword {
            text("server", AttributeTag.server)
            text("protocol", AttributeTag.protocol)
            object["port"] = Int(item.port)
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

    /// The document: keys sorted, two-space indentation, slashes unescaped; one trailing newline
    /// comes from the caller's `print`.
    ///
    /// - Throws: ``CommandFailure`` (internal error) if Foundation refuses the object, which only
    ///   holds strings, integers and nulls.
    static func text(_ document: Any) throws(CommandFailure) -> String {
        do {
            let data = try JSONSerialization.data(
                withJSONObject: document, options: [.sortedKeys, .prettyPrinted, .withoutEscapingSlashes])
            return String(decoding: data, as: UTF8.self)
        } catch {
            throw CommandFailure(ExitStatus.software, "cannot encode the item as JSON: \(error)")
        }
    }

    /// `2026-01-31T12:00:00Z`: ISO 8601 in UTC, whole seconds.
    static func iso8601(_ date: Date) -> String {
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime]
        formatter.timeZone = TimeZone(identifier: "UTC")
        return formatter.string(from: date)
    }

    private static func put(_ key: String, _ bytes: [UInt8]?, into object: inout [String: Any]) {
        guard let bytes else {
            object[key] = NSNull()
            return
        }
        if let text = String(validating: bytes, as: UTF8.self) {
            object[key] = text
        } else {
            object[key] = NSNull()
            object[key + "Base64"] = Data(bytes).base64EncodedString()
        }
    }
}
