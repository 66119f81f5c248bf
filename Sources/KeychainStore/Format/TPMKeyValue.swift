package import KeychainVocabulary
package import TPM
import WireFormat

/// What a key item whose private key lives in the TPM holds as its secret: the key's blob and
/// the random authorization value its policy asks for (docs/FORMAT.md, "TPM key items"). The
/// blob alone is usable only on its TPM and only with the value, which only the item's secret
/// holds: deleting the item destroys the key.
///
///     magic      4 bytes  "TKIV"
///     version    UINT16   1
///     authValue  UINT16 size + bytes (32)
///     key        UINT32 size + bytes: the TPM key (``TPMKey/serialized()``, "TKKY")
package struct TPMKeyValue: Sendable {
    static let magic: [UInt8] = Array("TKIV".utf8)
    static let version: UInt16 = 1

    package let key: TPMKey
    package let authValue: SecretBytes

    package init(key: TPMKey, authValue: SecretBytes) {
        self.key = key
        self.authValue = authValue
    }

    /// Decodes ``serialized()`` output.
    ///
    /// - Throws: ``KeychainError`` `.tampered` for anything ``serialized()`` does not produce.
    package init(parsing bytes: [UInt8]) throws(KeychainError) {
        var reader = WireReader(bytes)
        do throws(WireFormatError) {
            guard try reader.readBytes(4) == Self.magic, try reader.readUInt16() == Self.version else {
                throw WireFormatError("not a TPM key item value of version \(Self.version)")
            }
            let authValue = try reader.readSized(maximum: 64)
            let size = Int(try reader.readUInt32())
            guard size == reader.remaining else { throw WireFormatError("its key's size does not match") }
            let keyBytes = try reader.readBytes(size)
            do {
                key = try TPMKey(serialized: keyBytes)
            } catch {
                throw WireFormatError("its TPM key is malformed: \(error.message)")
            }
            self.authValue = SecretBytes(copying: authValue)
        } catch {
            throw KeychainError(.tampered, "The key item's TPM key is damaged: \(error.message)")
        }
    }

    /// The bytes to store as the item's secret.
    package func serialized() -> [UInt8] {
        var writer = WireWriter()
        writer.append(raw: Self.magic)
        writer.append(Self.version)
        writer.append(UInt16(authValue.count))
        authValue.withUnsafeBytes { writer.append(raw: $0) }
        let key = key.serialized()
        writer.append(UInt32(key.count))
        writer.append(raw: key)
        return writer.bytes
    }
}
