import Foundation
import TPM
import TPMKeychain

/// Output in the shape of macOS `security`'s item listings, so people and scripts that know
/// `security find-generic-password` read it without a manual.
enum SecurityFormat {
    /// The attribute block of one generic password, without its secret:
    ///
    ///     keychain: "/home/me/.local/share/tpm-keychain/default"
    ///     class: "genp"
    ///     attributes:
    ///         "acct"<blob>="alice"
    ///         ...
    ///
    /// Four-letter codes are Apple's (kSecAttrAccount is "acct", and so on), in `security`'s
    /// alphabetical order; "agrp" appears only for items with an access group.
    static func attributeBlock(_ item: ItemAttributes, keychain: String) -> [String] {
        var attributes = [
            blob("acct", item.account),
            timedate("cdat", item.creationDate),
            blob("gena", shown: item.genericData.map(value)),
            blob("icmt", shown: item.comment.map(quoted)),
            blob("labl", shown: item.label.map(quoted)),
            timedate("mdat", item.modificationDate),
            blob("svce", item.service),
        ]
        if let group = item.accessGroup { attributes.insert(blob("agrp", group), at: 1) }
        return ["keychain: \(quoted(keychain))", "class: \"genp\"", "attributes:"] + attributes.map { "    " + $0 }
    }

    /// A secret as `security -w` and `dump-keychain -d` show it: the text when it is UTF-8,
    /// quoted (or bare for `-w`), else `0x` and upper-case hex.
    static func value(_ data: Data) -> String {
        if let text = String(validating: data, as: UTF8.self) { return quoted(text) }
        return hex(data)
    }

    /// The text of a secret for `find-generic-password -w`: as is when UTF-8, else hex.
    static func bareValue(_ data: Data) -> String {
        String(validating: data, as: UTF8.self) ?? hex(data)
    }

    /// Double-quoted, with `"` and `\` escaped and control characters as octal escapes, so a
    /// stored name cannot move the cursor or forge lines of the listing.
    static func quoted(_ text: String) -> String {
        var result = "\""
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\"": result += "\\\""
            case "\\": result += "\\\\"
            case _ where scalar.value < 0x20 || (0x7F...0x9F).contains(scalar.value):
                for byte in String(scalar).utf8 { result += "\\" + String(byte, radix: 8).leftPadded(to: 3) }
            default: result.unicodeScalars.append(scalar)
            }
        }
        return result + "\""
    }

    /// `security`'s timedate text: UTC, `YYYYMMDDhhmmssZ`.
    static func timedate(_ date: Date) -> String {
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = TimeZone(identifier: "UTC") ?? calendar.timeZone
        let parts = calendar.dateComponents([.year, .month, .day, .hour, .minute, .second], from: date)
        return String(format: "%04d%02d%02d%02d%02d%02dZ", parts.year ?? 0, parts.month ?? 0, parts.day ?? 0,
                      parts.hour ?? 0, parts.minute ?? 0, parts.second ?? 0)
    }

    private static func blob(_ code: String, _ text: String) -> String {
        "\"\(code)\"<blob>=\(quoted(text))"
    }

    /// `shown` is already formatted; nil is `<NULL>`.
    private static func blob(_ code: String, shown: String?) -> String {
        "\"\(code)\"<blob>=\(shown ?? "<NULL>")"
    }

    private static func timedate(_ code: String, _ date: Date) -> String {
        "\"\(code)\"<timedate>=\"\(timedate(date))\""
    }

    private static func hex(_ data: Data) -> String {
        "0x" + data.hexString.uppercased()
    }
}

extension String {
    fileprivate func leftPadded(to width: Int) -> String {
        String(repeating: "0", count: max(0, width - count)) + self
    }
}
