import FoundationEssentials
import KeychainVocabulary
import WireFormat

#if canImport(Glibc)
import Glibc
#endif

/// Output in the shape of macOS `security`'s item listings, so people and scripts that know
/// `security find-generic-password` read it without a manual.
enum SecurityFormat {
    /// The attribute block of one password item, without its secret:
    ///
    ///     keychain: "/home/me/.local/share/tpm-keychain/default"
    ///     class: "genp"
    ///     attributes:
    ///         "acct"<blob>="alice"
    ///         ...
    ///
    /// Four-letter codes are Apple's (kSecAttrAccount is "acct", and so on), in `security`'s
    /// alphabetical order; "agrp" appears only for items with an access group. A generic password
    /// shows acct, cdat, desc, gena, icmt, labl, mdat, svce; an internet password acct, atyp, cdat,
    /// desc, icmt, labl, mdat, path, port, ptcl, sdmn, srvr, with `port` and `ptcl` as `security`
    /// prints a UINT32 (`"port"<uint32>=0x000001BB `, `"ptcl"<uint32>="htps"`).
    static func attributeBlock(_ item: ShownItem, keychain: String) -> [String] {
        var attributes: [(String, String)] = [
            ("acct", blob("acct", item)),
            ("cdat", timedate("cdat", item.date(AttributeTag.creationDate))),
            ("desc", blob("desc", item)),
            ("icmt", blob("icmt", item)),
            ("labl", blob("labl", item)),
            ("mdat", timedate("mdat", item.date(AttributeTag.modificationDate))),
        ]
        if item.itemClass == .internetPassword {
            attributes += [
                ("atyp", blob("atyp", item)),
                ("path", blob("path", item)),
                (
                    "port",
                    "\"port\"<uint32>=" + (item.bytes(AttributeTag.port) == nil ? "<NULL>" : buffer(uint32(item.port)))
                ),
                ("ptcl", "\"ptcl\"<uint32>=" + (item.bytes(AttributeTag.protocol).map(buffer) ?? "<NULL>")),
                ("sdmn", blob("sdmn", item)),
                ("srvr", blob("srvr", item)),
            ]
        } else {
            attributes += [("gena", blob("gena", item)), ("svce", blob("svce", item))]
        }
        if item.bytes(AttributeTag.accessGroup).map({ !$0.isEmpty }) == true {
            attributes.append(("agrp", blob("agrp", item)))
        }
        let lines = attributes.sorted { $0.0 < $1.0 }.map { "    " + $0.1 }
        return ["keychain: \(quoted(keychain))", "class: \(quoted(item.classCode))", "attributes:"] + lines
    }

    /// A secret as `security -g` and `dump-keychain -d` show it: the text when it is UTF-8,
    /// quoted (or bare for `-w`), else `0x` and upper-case hex.
    static func value(_ data: Data) -> String {
        if let text = String(validating: data, as: UTF8.self) { return quoted(text) }
        return hex(data)
    }

    /// The text of a secret for `find-*-password -w`: as is when UTF-8, else hex.
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

    /// `security`'s print_buffer, which it uses for UINT32 attributes: `0x` and the bytes in hex
    /// when any is not printable ASCII (a backslash counts as not printable), then the printable
    /// ones quoted, octal escapes for the rest. `security` writes one space after the hex, and a
    /// second one before the quoted text when both appear: `0x000001BB `, `"htps"`,
    /// `0x00002021  "\000\000 !"`. Kept, since scripts match these lines.
    static func buffer(_ bytes: [UInt8]) -> String {
        let printable = { (byte: UInt8) in (0x20...0x7E).contains(byte) && byte != UInt8(ascii: "\\") }
        let ascii = bytes.contains(where: printable)
        let hex = bytes.contains { !printable($0) }
        var result = ""
        if hex { result += "0x" + bytes.hexString.uppercased() + (ascii ? "  " : " ") }
        if ascii {
            result += "\""
            for byte in bytes {
                result +=
                    printable(byte) ? String(UnicodeScalar(byte)) : "\\" + String(byte, radix: 8).leftPadded(to: 3)
            }
            result += "\""
        }
        return result
    }

    /// `security`'s timedate text: UTC, `YYYYMMDDhhmmssZ`.
    static func timedate(_ date: Date) -> String {
        var seconds = time_t(date.timeIntervalSince1970.rounded(.down))
        var parts = tm()
        gmtime_r(&seconds, &parts)
        let fields: [(Int32, Int)] = [
            (parts.tm_year + 1900, 4), (parts.tm_mon + 1, 2), (parts.tm_mday, 2), (parts.tm_hour, 2),
            (parts.tm_min, 2), (parts.tm_sec, 2),
        ]
        return fields.map { String($0.0).leftPadded(to: $0.1) }.joined() + "Z"
    }

    /// A text attribute: quoted when UTF-8, hex otherwise (SecItem code may store Data), `<NULL>` when absent.
    private static func blob(_ code: StaticString, _ item: ShownItem) -> String {
        let tag = FourCharacterCode(code)
        return "\"\(tag)\"<blob>=" + (item.bytes(tag).map { value(Data($0)) } ?? "<NULL>")
    }

    private static func timedate(_ code: String, _ date: Date?) -> String {
        "\"\(code)\"<timedate>=" + (date.map { "\"\(timedate($0))\"" } ?? "<NULL>")
    }

    private static func uint32(_ value: UInt16) -> [UInt8] {
        [0, 0, UInt8(value >> 8), UInt8(value & 0xFF)]
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
