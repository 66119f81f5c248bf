import Crypto
import KeychainVocabulary

// The one reader of format-1 item files. Every format-1 read goes through it: a get, a listing's
// scan, a listing's secret and the upgrade to format 2; each differed only in which sections it
// needed and whose identity it expected.
extension ItemFileV1 {
    /// A format-1 item as read: its header, its authenticated attributes, and its secret when asked for.
    struct Read {
        let header: Header
        let attributes: ItemAttributes
        let value: ItemValue?
    }

    /// Reads an item file of `fileSize` bytes through `read` (count, offset): the header, the
    /// attributes (checked to be the item `expected` names, when given) and, with `withSecret`,
    /// the secret, authenticated together with the identity the attributes give. Without the
    /// secret, its section is not read.
    ///
    /// - Parameter key: the item key of a header (derived from its salt; the store caches it).
    /// - Throws: ``KeychainError`` `.tampered` for an impossible size, a failed authentication or
    ///   a file of another item.
    static func read(
        fileSize: Int, storeID: [UInt8], path: String, withSecret: Bool, expected: ItemIdentity? = nil,
        read: (_ count: Int, _ offset: Int) throws(KeychainError) -> [UInt8],
        key: (Header) -> SymmetricKey
    ) throws(KeychainError) -> Read {
        guard fileSize >= headerSize, fileSize <= maximumFileSize else {
            throw KeychainError(.tampered, "\(path) has an impossible size (\(fileSize) bytes)")
        }
        // One system call for the whole file when the secret is wanted; else the two sections needed.
        let whole = withSecret ? try read(fileSize, 0) : nil
        let headerBytes: ArraySlice<UInt8>
        if let whole { headerBytes = whole[0..<headerSize] } else { headerBytes = try read(headerSize, 0)[...] }
        let header = try decodeHeader(headerBytes, fileSize: fileSize, storeID: storeID, path: path)
        let itemKey = key(header)
        let sealed: ArraySlice<UInt8>
        if let whole {
            sealed = whole[header.attributesRange]
        } else {
            sealed = try read(header.attributesRange.count, header.attributesRange.lowerBound)[...]
        }
        let attributes = try decryptAttributes(sealed, header: header, key: itemKey, expected: expected, path: path)
        guard let whole else { return Read(header: header, attributes: attributes, value: nil) }
        let identity = expected ?? ItemIdentity(checked: attributes)
        let value = try decryptSecret(of: whole, header: header, key: itemKey, identity: identity, path: path)
        return Read(header: header, attributes: attributes, value: value)
    }
}
