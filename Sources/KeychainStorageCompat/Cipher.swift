import Crypto
import CryptoExtras
@_exported import Foundation

/// What encrypts a store's values on top of the TPM-sealed store: the caller's second key. SAP's
/// `Ciphering`; ``Cipher`` is the implementation from a password.
public protocol Ciphering: Sendable {
    /// Encrypts `data`; the result must authenticate itself (a changed byte fails ``decrypt(_:)``).
    func encrypt(_ data: Data) throws -> Data
    /// Decrypts what ``encrypt(_:)`` made.
    ///
    /// - Throws: when the data was made with another key, or changed.
    func decrypt(_ data: Data) throws -> Data
}

/// A password cipher: AES-256-GCM under a key derived from the password and salt with scrypt
/// (memory-hard: N = 2^15, r = 8, p = 1, 32 MiB, by default), once per `Cipher`, not per item.
/// Each value: nonce (12) ‖ ciphertext ‖ tag (16).
public final class Cipher: Ciphering {
    /// scrypt's cost parameters: the same password, salt and parameters always give the same
    /// key. A store records those of the `Cipher` it was created (or last changed) with, so that
    /// opening it with other parameters says so instead of reporting a wrong password.
    public struct Parameters: Sendable, Hashable, Codable {
        public var rounds: Int
        public var blockSize: Int
        public var parallelism: Int

        public init(rounds: Int, blockSize: Int, parallelism: Int) {
            self.rounds = rounds
            self.blockSize = blockSize
            self.parallelism = parallelism
        }

        /// N = 2^15, r = 8, p = 1: about 32 MiB and a tenth of a second.
        public static let standard = Parameters(rounds: 1 << 15, blockSize: 8, parallelism: 1)
    }

    private let key: SymmetricKey
    /// The scrypt parameters the key was derived with.
    public let parameters: Parameters

    /// - Throws: ``KeychainStorageError/invalidCipher(_:)`` for an empty password or salt.
    public convenience init(password: String, salt: String) throws {
        try self.init(password: password, salt: Data(salt.utf8))
    }

    /// - Throws: ``KeychainStorageError/invalidCipher(_:)`` for an empty password or salt, or
    ///   parameters scrypt refuses.
    public init(password: String, salt: Data, parameters: Parameters = .standard) throws {
        guard !password.isEmpty, !salt.isEmpty else {
            throw KeychainStorageError.invalidCipher("A cipher needs a non-empty password and salt")
        }
        do {
            key = try KDF.Scrypt.deriveKey(
                from: Data(password.utf8), salt: salt, outputByteCount: 32, rounds: parameters.rounds,
                blockSize: parameters.blockSize, parallelism: parameters.parallelism)
            self.parameters = parameters
        } catch {
            throw KeychainStorageError.invalidCipher("scrypt refused the parameters: \(error)")
        }
    }

    public func encrypt(_ data: Data) throws -> Data {
        guard let combined = try AES.GCM.seal(data, using: key).combined else {
            throw KeychainStorageError.encryptionFailed("AES-GCM gave no output")
        }
        return combined
    }

    public func decrypt(_ data: Data) throws -> Data {
        do {
            return try AES.GCM.open(AES.GCM.SealedBox(combined: data), using: key)
        } catch {
            throw KeychainStorageError.decryptionFailed("The value does not open with this cipher")
        }
    }
}

/// No cipher: values are stored as given (still encrypted by the TPM-sealed store).
struct PlainCipher: Ciphering {
    func encrypt(_ data: Data) throws -> Data { data }
    func decrypt(_ data: Data) throws -> Data { data }
}
