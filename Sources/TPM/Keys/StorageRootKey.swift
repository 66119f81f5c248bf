internal import CTSS2
import Logging
import WireFormat

/// The owner-hierarchy storage key that parents every sealed object and salts every session.
struct StorageRootKey {
    let handle: ESYS_TR
    let name: [UInt8]
    let algorithm: StorageKeyAlgorithm
    /// A persistent key is not ours to flush (or to evict).
    let isPersistent: Bool
}

extension Engine {
    /// TCG provisioning guidance's well-known handle for a persistent SRK.
    static let persistentStorageKeyHandle: UInt32 = 0x8100_0001

    /// The storage key to use, loaded once per connection.
    ///
    /// With `pinnedName` (the name recorded when data was sealed) a persistent key at 0x81000001
    /// is used only if its name is exactly that: a key's name hashes its whole public area, so
    /// equal names mean the same template and the same key, and nothing a third party persisted
    /// there is trusted otherwise. Failing that, the key is derived again from the owner seed
    /// (CreatePrimary is deterministic) and must come out with the pinned name, or the data was
    /// sealed on another TPM or before the owner hierarchy was cleared. Persistent objects are
    /// never created, evicted or overwritten.
    ///
    /// - Parameter algorithm: nil means ECC P-256, falling back to RSA-2048 when the TPM lacks ECC.
    /// - Throws: ``TPMError`` `.wrongStorageKey` when the derived key's name differs from `pinnedName`.
    func storageKey(algorithm: StorageKeyAlgorithm?, pinnedName: [UInt8]?) throws -> StorageRootKey {
        let preferred = algorithm ?? .eccP256
        if let cached = storageKeys[preferred] {
            try Self.verify(cached.name, against: pinnedName)
            return cached
        }
        if let pinnedName, let cached = try cachedStorageKey(named: pinnedName, algorithm: preferred) {
            storageKeys[preferred] = cached
            return cached
        }
        if let pinnedName, let persistent = try persistentStorageKey(named: pinnedName, algorithm: preferred) {
            configuration.logger.debug("using the persistent storage key", metadata: ["handle": "0x81000001"])
            storageKeys[preferred] = persistent
            return persistent
        }
        let created: (handle: ESYS_TR, name: [UInt8])
        var chosen = preferred
        do {
            created = try createPrimary(.storageRootKey(preferred))
        } catch let error as TPMError where algorithm == nil && Self.signalsMissingAlgorithm(error) {
            chosen = .rsa2048
            if let cached = storageKeys[chosen] { return cached }
            created = try createPrimary(.storageRootKey(chosen))
        }
        do {
            try Self.verify(created.name, against: pinnedName)
        } catch {
            flush(created.handle)
            throw error
        }
        configuration.logger.debug("derived the storage key", metadata: ["algorithm": "\(chosen.rawValue)"])
        let key = StorageRootKey(handle: created.handle, name: created.name, algorithm: chosen, isPersistent: false)
        if let contextCache, let context = try? saveContext(created.handle) {
            contextCache.saveStorageKeyContext(context)
        }
        storageKeys[chosen] = key
        return key
    }

    /// The storage key from the context cache, if the TPM accepts the saved context and the key
    /// has the pinned name; otherwise nil, with nothing left loaded.
    private func cachedStorageKey(named pinnedName: [UInt8], algorithm: StorageKeyAlgorithm) throws -> StorageRootKey? {
        guard let context = contextCache?.loadStorageKeyContext(), let handle = try? loadContext(context) else {
            return nil
        }
        guard let name = try? name(of: handle), name == pinnedName else {
            flush(handle)
            return nil
        }
        configuration.logger.debug("loaded the storage key from its saved context")
        return StorageRootKey(handle: handle, name: name, algorithm: algorithm, isPersistent: false)
    }

    private func persistentStorageKey(
        named pinnedName: [UInt8], algorithm: StorageKeyAlgorithm
    ) throws -> StorageRootKey? {
        var handle = ESYS_TR(ESYS_TR_NONE)
        let rc = Esys_TR_FromTPMPublic(
            esys, Self.persistentStorageKeyHandle, ESYS_TR(ESYS_TR_NONE),
            ESYS_TR(ESYS_TR_NONE), ESYS_TR(ESYS_TR_NONE), &handle)
        guard rc == TSS2_RC_SUCCESS else { return nil }
        if let name = try? name(of: handle), name == pinnedName {
            return StorageRootKey(handle: handle, name: name, algorithm: algorithm, isPersistent: true)
        }
        _ = Esys_TR_Close(esys, &handle)
        return nil
    }

    private static func verify(_ name: [UInt8], against pinnedName: [UInt8]?) throws(TPMError) {
        guard let pinnedName, pinnedName != name else { return }
        throw TPMError(
            .wrongStorageKey,
            "This TPM's storage key is not the one the data was sealed to: the data belongs to another TPM, or this TPM's owner hierarchy was cleared (expected \(pinnedName.hexString), found \(name.hexString))"
        )
    }

    /// TPM_RC_ASYMMETRIC, TPM_RC_CURVE, TPM_RC_KEY_SIZE, TPM_RC_TYPE: the TPM cannot make an ECC key.
    private static func signalsMissingAlgorithm(_ error: TPMError) -> Bool {
        guard error.layer == .tpm else { return false }
        let base = TPMError.tpmBaseCode(error.responseCode)
        return [
            ResponseCodes.format1 + 0x01, ResponseCodes.format1 + 0x26, ResponseCodes.format1 + 0x07,
            ResponseCodes.format1 + 0x0A, ResponseCodes.value,
        ].contains(base)
    }
}
