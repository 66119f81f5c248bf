/// How internet-password attributes are stored, as SecItem (and so Apple's keychain) stores them.
package enum InternetPasswordAttributes {
    /// A port as SecItem stores a number: eight bytes, big-endian; 0 for none (Apple's "no
    /// specific port").
    package static func port(_ port: UInt16?) -> [UInt8] {
        let value = UInt64(port ?? 0)
        return (0..<8).map { UInt8(truncatingIfNeeded: value >> (56 - 8 * $0)) }
    }

    /// The port an item's `port` attribute holds: a SecItem number (eight bytes) or a UINT32
    /// (four), big-endian; nil when absent or not a port.
    package static func port(in attributes: AttributeList) -> UInt16? {
        guard let bytes = attributes[AttributeTag.port], bytes.count == 8 || bytes.count == 4 else { return nil }
        let value = bytes.reduce(UInt64(0)) { $0 << 8 | UInt64($1) }
        return UInt16(exactly: value)
    }

    /// Apple's kSecAttrProtocol codes for the protocol names git (and URLs) use, those
    /// git-credential-osxkeychain maps.
    package static let protocolCodes: [String: String] = [
        "https": "htps", "http": "http", "ftp": "ftp ", "ftps": "ftps", "imap": "imap", "imaps": "imps", "smtp": "smtp",
    ]

    /// A four-character code (kSecAttrProtocol, kSecAttrAuthenticationType) as stored: its four
    /// bytes; nil unless `text` is exactly four printable ASCII characters.
    package static func fourCharacterCode(_ text: String) -> [UInt8]? {
        let bytes = Array(text.utf8)
        guard bytes.count == 4, bytes.allSatisfy({ (0x20...0x7E).contains($0) }) else { return nil }
        return bytes
    }
}
