package import KeychainVocabulary
import TPM
import WireFormat

extension AttributeList {
    /// - Throws: ``KeychainError`` `.tampered` for truncated entries, oversized values, or tags
    ///   out of order or repeated (no writer produces those).
    package init(decoding bytes: [UInt8], path: String) throws(KeychainError) {
        self = try KeychainError.parsing(
            { () throws in
                // Each entry takes at least 8 bytes; most items have a dozen attributes or fewer.
                var list = AttributeList(minimumCapacity: min(bytes.count / 8, 16))
                var reader = WireReader(bytes)
                var previous: FourCharacterCode?
                while reader.remaining > 0 {
                    let tag = FourCharacterCode(rawValue: try reader.readUInt32())
                    let count = Int(try reader.readUInt32())
                    guard count <= Self.maximumValueSize else {
                        throw KeychainError(.tampered, "\(path) has an attribute \(tag) of \(count) bytes")
                    }
                    if let previous, tag <= previous {
                        throw KeychainError(.tampered, "\(path) has attributes out of order")
                    }
                    list[tag] = try reader.readBytes(count)
                    previous = tag
                }
                return list
            }, damaged: { (error) in KeychainError(.tampered, "\(path) has truncated attributes", underlying: error) })
    }
}
