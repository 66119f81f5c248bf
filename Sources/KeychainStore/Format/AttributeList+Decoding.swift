package import KeychainVocabulary

extension AttributeList {
    /// - Throws: ``KeychainError`` `.tampered` for truncated entries, oversized values, or tags
    ///   out of order or repeated (no writer produces those).
    package init(decoding bytes: [UInt8], path: String) throws(KeychainError) {
        do {
            try self.init(section: bytes)
        } catch {
            switch error {
            case .truncated:
                throw KeychainError(.tampered, "\(path) has truncated attributes")
            case .oversized(let tag, let count):
                throw KeychainError(.tampered, "\(path) has an attribute \(tag) of \(count) bytes")
            case .outOfOrder:
                throw KeychainError(.tampered, "\(path) has attributes out of order")
            }
        }
    }
}
