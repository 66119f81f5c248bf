internal import CTSS2
import Logging
import SystemCalls
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
        // The context file caches the store's storage key alone; the key-file parent is derived.
        if let pinnedName, preferred != .eccP256KeyFile,
            let cached = try cachedStorageKey(named: pinnedName, algorithm: preferred)
        {
            storageKeys[preferred] = cached
            return cached
        }
        if let remembered = try rememberedStorageKey(algorithm: preferred, pinnedName: pinnedName) {
            storageKeys[preferred] = remembered
            return remembered
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
            if let remembered = try rememberedStorageKey(algorithm: chosen, pinnedName: nil) {
                storageKeys[chosen] = remembered
                return remembered
            }
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
        if let context = try? saveContext(created.handle) {
            if chosen != .eccP256KeyFile { contextCache?.saveStorageKeyContext(context) }
            Self.rememberedContexts.withLock {
                $0[RememberedKey(tcti: configuration.tcti, algorithm: chosen)] = (context, created.name)
            }
        }
        storageKeys[chosen] = key
        return key
    }

    /// Storage key contexts this process saved or loaded, by TPM and algorithm, with the name the
    /// key had: later connections of the process load the key (one TPM2_ContextLoad) instead of
    /// deriving it again (TPM2_CreatePrimary, the most expensive command on a real TPM), also
    /// when they seal and no name is pinned. Process memory only: nothing here comes from a file.
    private static let rememberedContexts = Locked<[RememberedKey: (context: [UInt8], name: [UInt8])]>([:])

    /// Forgets what this process remembered for `tcti`: for tests that count a path's commands
    /// through a TCTI (a loopback port) that an earlier TPM of the process may have had.
    static func forgetRememberedContexts(tcti: String) {
        rememberedContexts.withLock { remembered in
            for key in remembered.keys where key.tcti == tcti { remembered.removeValue(forKey: key) }
        }
    }

    private struct RememberedKey: Hashable {
        let tcti: String
        let algorithm: StorageKeyAlgorithm
    }

    /// The storage key from this process's memory, if the TPM still accepts its context (not
    /// after a TPM reset) and its name is the one remembered (and pinned, when given).
    private func rememberedStorageKey(algorithm: StorageKeyAlgorithm, pinnedName: [UInt8]?) throws -> StorageRootKey? {
        let slot = RememberedKey(tcti: configuration.tcti, algorithm: algorithm)
        guard let remembered = Self.rememberedContexts.withLock({ $0[slot] }) else { return nil }
        if let pinnedName, pinnedName != remembered.name { return nil }
        guard let handle = try? loadContext(remembered.context) else {
            Self.rememberedContexts.withLock { _ = $0.removeValue(forKey: slot) }
            return nil
        }
        guard let name = try? name(of: handle), name == remembered.name else {
            flush(handle)
            return nil
        }
        // Later processes read the file cache, not this memory: keep it current.
        if algorithm != .eccP256KeyFile, let contextCache, contextCache.loadStorageKeyContext() != remembered.context {
            contextCache.saveStorageKeyContext(remembered.context)
        }
        return StorageRootKey(handle: handle, name: name, algorithm: algorithm, isPersistent: false)
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
        Self.rememberedContexts.withLock {
            $0[RememberedKey(tcti: configuration.tcti, algorithm: algorithm)] = (context, name)
        }
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
