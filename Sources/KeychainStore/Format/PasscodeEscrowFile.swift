import Crypto
import KeychainVocabulary
import SystemCalls
import TPM
import WireFormat

/// `passcode.escrow`: the device passcode key's seed, encrypted to the store's recovery key, so
/// that the person who holds the recovery key can make the passcode work again after the TPM
/// lost the device's passcode counter (review 3, N1: anyone with the owner hierarchy's empty
/// authorization can undefine it, and the sealed passcode key then never opens; docs/FORMAT.md,
/// "Passcode escrow"). All integers big-endian.
///
///     offset size  field
///     0      4     magic "TKPE"
///     4      2     version = 1
///     6      2     reserved = 0
///     8      16    store ID
///     24     4     the device's NV base handle B
///     28     32    the device passcode public key P (X25519) the seed belongs to
///     60     32    recovery public key P_R (from the store's authenticated recovery.key)
///     92     92    the seed (32 bytes) in a ``RecoveryBox`` (E, nonce, ciphertext ‖ tag)
///
/// The box is a ``RecoveryBox`` with info "TPMKeychain passcode escrow". No MAC: a reader trusts the seed only when its public half is the P the device's
/// authenticated state names, which a planted file cannot arrange.
struct PasscodeEscrowFile {
    static let fileName = "passcode.escrow"
    static let magic = Array("TKPE".utf8)
    static let version: UInt16 = 1
    static let size = 136 + 48
    static let info = Array("TPMKeychain passcode escrow".utf8)

    let storeID: [UInt8]
    let deviceBase: UInt32
    let passcodePublicKey: [UInt8]

    /// Encrypts `seed` (the passcode key of the device at `deviceBase`, public half
    /// `passcodePublicKey`) to the recovery key whose public half is `recoveryPublicKey`.
    static func seal(
        seed: SecretBytes, passcodePublicKey: [UInt8], deviceBase: UInt32, recoveryPublicKey: [UInt8],
        storeID: [UInt8]
    ) throws(KeychainError) -> [UInt8] {
        do {
            var header = WireWriter()
            header.append(raw: magic)
            header.append(version)
            header.append(UInt16(0))
            header.append(raw: storeID)
            header.append(deviceBase)
            header.append(raw: passcodePublicKey)
            header.append(raw: recoveryPublicKey)
            return try RecoveryBox.seal(
                seed, after: header.bytes, recoveryPublicKey: recoveryPublicKey, info: info, storeID: storeID)
        } catch {
            throw KeychainError(
                .storageFailed, "Encrypting the passcode key's escrow to the recovery key failed", underlying: error)
        }
    }

    /// The seed and what the file says it belongs to, if `recoveryKey` is the one it was made for.
    ///
    /// - Throws: ``KeychainError`` `.authenticationFailed` for another recovery key, `.tampered` for
    ///   a file no writer produces, of another store, or that fails authentication.
    static func open(
        _ bytes: [UInt8], recoveryKey: SecretBytes, storeID: [UInt8], path: String
    ) throws(KeychainError) -> (file: PasscodeEscrowFile, seed: SecretBytes) {
        guard bytes.count == size, Array(bytes[0..<4]) == magic, bytes[4] == 0, bytes[5] == UInt8(version),
            bytes[6] == 0, bytes[7] == 0
        else { throw KeychainError(.tampered, "\(path) is not a passcode escrow of this version") }
        guard Array(bytes[8..<24]) == storeID else {
            throw KeychainError(.tampered, "\(path) belongs to another store")
        }
        let recoveryPublicKey = Array(bytes[60..<92])
        guard try RecoveryFile.publicKey(of: recoveryKey) == recoveryPublicKey else {
            throw KeychainError(
                .authenticationFailed,
                "That recovery key is not the one the passcode was escrowed to: check it for typos, or use the store whose recovery key it is"
            )
        }
        do {
            let seed = try RecoveryBox.open(
                bytes, headerSize: 92, recoveryKey: recoveryKey, recoveryPublicKey: recoveryPublicKey, info: info,
                storeID: storeID)
            let base: UInt32 = BigEndian.integer(bytes[24..<28])
            return (
                PasscodeEscrowFile(storeID: storeID, deviceBase: base, passcodePublicKey: Array(bytes[28..<60])), seed
            )
        } catch {
            throw KeychainError(
                .tampered, "\(path) is damaged: the recovery key is right but the file fails authentication",
                underlying: error)
        }
    }
}
