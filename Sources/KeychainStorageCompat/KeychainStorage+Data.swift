import Foundation
import KeychainVocabulary
import SystemCalls
import TPMKeychain

// DataStoring: values by key in the store, under the password cipher when there is one.
extension KeychainStorage {
    public func put(data: Data, for key: String) throws {
        try withStoreLock(exclusive: false) {
            let (cipher, keychain) = try current()
            try keychainCall { try keychain.set(try cipher.encrypt(data), forKey: key) }
        }
    }

    public func data(for key: String) throws -> Data? {
        let (cipher, keychain) = try current()
        guard let stored = try keychainCall({ try keychain.data(forKey: key) }) else {
            // Another process may have moved the store to a new generation meanwhile.
            guard try refreshGeneration() else { return nil }
            return try data(for: key)
        }
        do {
            return try cipher.decrypt(stored)
        } catch {
            if try refreshGeneration() { return try data(for: key) }
            throw KeychainStorageError.decryptionFailed(
                "The value for \"\(key)\" does not open with this store's cipher (the cipher was changed by another instance)"
            )
        }
    }

    public func removeData(for key: String) throws {
        try withStoreLock(exclusive: false) {
            let (_, keychain) = try current()
            _ = try keychainCall { try keychain.remove(key) }
        }
    }

    public func removeAllData() throws {
        try withStoreLock(exclusive: false) {
            let (_, keychain) = try current()
            _ = try keychainCall { try keychain.removeAll() }
        }
    }

    public func keys() throws -> Set<String> {
        let (_, keychain) = try current()
        return Set(try keychainCall { try keychain.allKeys() })
    }

    /// Re-encrypts every value with `newCipher`, as one crash-safe transaction under the store's
    /// exclusive lock: generation G+1 is written in full, then `.meta` switches (the commit), then
    /// generation G is removed. Killed at any point, the store opens with exactly one of the two
    /// ciphers and every value reads with it; once this returns, nothing reads with the old one.
    ///
    /// - Throws: ``KeychainStorageError``; the store keeps its old cipher.
    public func changeCipher(to newCipher: any Ciphering) throws {
        try withStoreLock(exclusive: true) {
            let meta = try readMeta()
            let (cipher, generation) = state.withLock { ($0.cipher, $0.generation) }
            guard meta.generation == generation else {
                throw KeychainStorageError.wrongCipher(
                    "Another instance changed the cipher of \"\(name)\" meanwhile; open the store again")
            }
            let old = try keychain(generation)
            let next = try keychain(generation + 1)
            _ = try keychainCall { try next.removeAll() } // a change that died before its commit
            var rewritten = 0
            for key in try keychainCall({ try old.allKeys() }) {
                guard let stored = try keychainCall({ try old.data(forKey: key) }) else { continue }
                try keychainCall { try next.set(try newCipher.encrypt(try cipher.decrypt(stored)), forKey: key) }
                rewritten += 1
                OperationProgress.report(.rewrote(rewritten))
            }
            try writeMeta(
                generation: generation + 1, verifier: try newCipher.encrypt(Self.verifierText),
                kdf: (newCipher as? Cipher)?.parameters, mode: .update)
            OperationProgress.report(.committed)
            state.withLock { state in
                state.cipher = newCipher
                state.generation = generation + 1
            }
            _ = try keychainCall { try old.removeAll() }
        }
    }
}
