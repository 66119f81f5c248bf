import Crypto
import FoundationEssentials
package import KeychainVocabulary
import SystemCalls
package import TPM
import WireFormat

#if canImport(Glibc)
import Glibc
#endif

// The recovery key: an opt-in second way to the master key, for when the TPM that sealed it is
// gone (cleared, replaced, a VM moved). `recovery.key` holds the master key encrypted to the
// public half of a random 256-bit key that is shown to the person once and kept nowhere on the
// machine (so a rotation can encrypt its new master key for the same recovery key). Recovering
// seals the same master key to the current TPM and rewrites store.meta; items stay as they are,
// except those that were bound to the old TPM by design: this-device-only items and items behind
// access control (their key records are sealed to the old TPM's state and are gone with it).
extension ItemStore {
    /// What a recovery did.
    package struct Recovery: Sendable, Equatable {
        /// Items readable again under the current TPM.
        package let kept: Int
        /// Items deleted because they were bound to the old TPM (this-device-only, or protected).
        package let removed: Int
    }

    /// Adds (or replaces) the store's recovery key: the master key, unsealed once more by the
    /// TPM, is encrypted under a new random key, which is returned to be shown once.
    ///
    /// - Throws: ``KeychainError`` as opening does (the TPM unseals the master key), `.storageFailed`.
    package func addRecoveryKey() throws(KeychainError) -> SecretBytes {
        let lock = try rootDirectory.lockItself(timeout: lockTimeout, purpose: "adding a recovery key")
        defer { withExtendedLifetime(lock) {} }
        _ = try refreshIfRotated(try current())
        let state = try current()
        let masterKey = try withLentTPM { (tpm) throws(KeychainError) in
            try Self.unsealMasterKey(rootDirectory, tpm: tpm, storeID: storeID, keys: state.keys)
        }
        let recoveryKey: SecretBytes
        do {
            recoveryKey = try SecretBytes.random(count: 32)
        } catch {
            throw KeychainError(.storageFailed, "No randomness for a recovery key", underlying: error)
        }
        let sealed = try RecoveryFile.seal(
            masterKey: masterKey, recoveryPublicKey: try RecoveryFile.publicKey(of: recoveryKey), storeID: storeID,
            keyGeneration: Self.keyGeneration(state.keys), metadataKey: state.keys.metadata)
        _ = try rootDirectory.remove(RecoveryFile.nextFileName, durable: false)
        try rootDirectory.replace(RecoveryFile.fileName, with: sealed, durable: true)
        return recoveryKey
    }

    /// Escrows the device passcode key (its seed, public half and the device's NV base) to the
    /// store's recovery key, as `passcode.escrow`, for ``openPasscodeEscrow(at:recoveryKey:)``;
    /// false (nothing written) when the store has no recovery key. The recovery public key is
    /// taken only from a `recovery.key` this store authenticates, as a rotation takes it.
    ///
    /// - Throws: ``KeychainError`` `.tampered` for a recovery key file of another store or key.
    package func escrowPasscode(seed: SecretBytes, publicKey: [UInt8], deviceBase: UInt32) throws(KeychainError) -> Bool
    {
        let lock = try rootDirectory.lockItself(timeout: lockTimeout, purpose: "escrowing the device passcode")
        defer { withExtendedLifetime(lock) {} }
        let state = try current()
        guard let file = try rootDirectory.openFile(RecoveryFile.fileName) else { return false }
        guard file.size == RecoveryFile.size else {
            throw KeychainError(
                .tampered, "\(file.path) is not an authenticated recovery key: add a new one (add-recovery-key)")
        }
        let header = try RecoveryFile.authenticatedHeader(
            try file.read(count: file.size, at: 0), metadataKey: state.keys.metadata, path: file.path)
        guard header.storeID == storeID, header.keyGeneration == Self.keyGeneration(state.keys) else {
            throw KeychainError(
                .tampered, "\(file.path) belongs to another store or master key: add a new recovery key")
        }
        let sealed = try PasscodeEscrowFile.seal(
            seed: seed, passcodePublicKey: publicKey, deviceBase: deviceBase,
            recoveryPublicKey: header.recoveryPublicKey, storeID: storeID)
        try rootDirectory.replace(PasscodeEscrowFile.fileName, with: sealed, durable: true)
        return true
    }

    /// The device passcode key's seed escrowed in the store at `root`, opened with the store's
    /// recovery key; read without the TPM (the device checks the seed against its authenticated
    /// state before it uses it).
    ///
    /// - Throws: ``KeychainError`` `.storeNotFound`; `.notAvailable` when nothing was escrowed in
    ///   the store; `.authenticationFailed` for another recovery key; `.tampered`.
    package static func openPasscodeEscrow(
        at root: String, recoveryKey: SecretBytes
    ) throws(KeychainError) -> (seed: SecretBytes, publicKey: [UInt8], deviceBase: UInt32) {
        guard root.hasPrefix("/"),
            let rootDirectory = try Directory.open(root, in: nil, create: false, storeRoot: true),
            let metadataFile = try rootDirectory.openFile(StoreMetadata.fileName),
            metadataFile.size <= StoreMetadata.maximumFileSize
        else {
            throw KeychainError(.storeNotFound, "No keychain store at \(root)")
        }
        let parsed = try StoreMetadata.parse(
            try metadataFile.read(count: metadataFile.size, at: 0), path: metadataFile.path)
        guard let file = try rootDirectory.openFile(PasscodeEscrowFile.fileName), file.size <= 4096 else {
            throw KeychainError(
                .notAvailable,
                "The keychain at \(root) holds no escrowed passcode: the passcode was set or changed before the store had a recovery key, or with another store"
            )
        }
        let (escrow, seed) = try PasscodeEscrowFile.open(
            try file.read(count: file.size, at: 0), recoveryKey: recoveryKey, storeID: parsed.metadata.storeID,
            path: file.path)
        return (seed, escrow.passcodePublicKey, escrow.deviceBase)
    }

    /// The 8 bytes a recovery file records of the master key it holds.
    static func keyGeneration(_ keys: StoreKeys) -> [UInt8] {
        [UInt8](hexString: keyGenerationTag(keys)) ?? []
    }

    /// A rotation's part: the new master key encrypted for the same recovery key, as
    /// `recovery.key.next` (before the commit); renamed over `recovery.key` after it by
    /// ``finishRecoveryKeyRotation(in:keys:)``. Nothing when the store has no recovery key.
    ///
    /// The recovery public key is taken only from a file this store authenticated under the old
    /// master key (`oldKeys`): a planted one stops the rotation before anything is encrypted to it.
    static func prepareRecoveryKeyRotation(
        in rootDirectory: Directory, masterKey: SecretBytes, keys: StoreKeys, oldKeys: StoreKeys,
        storeID: [UInt8]
    ) throws(KeychainError) {
        guard let file = try rootDirectory.openFile(RecoveryFile.fileName) else { return }
        guard file.size == RecoveryFile.size || file.size == RecoveryFile.unauthenticatedSize else {
            // Rotating past it would leave a recovery key that silently opens nothing: stop first.
            throw KeychainError(
                .tampered,
                "\(file.path) is damaged: add a new recovery key (add-recovery-key) before rotating the master key")
        }
        let header = try RecoveryFile.authenticatedHeader(
            try file.read(count: file.size, at: 0), metadataKey: oldKeys.metadata, path: file.path)
        guard header.storeID == storeID, header.keyGeneration == keyGeneration(oldKeys) else {
            throw KeychainError(
                .tampered,
                "\(file.path) belongs to another store or master key: add a new recovery key before rotating the master key"
            )
        }
        let sealed = try RecoveryFile.seal(
            masterKey: masterKey, recoveryPublicKey: header.recoveryPublicKey, storeID: storeID,
            keyGeneration: keyGeneration(keys), metadataKey: keys.metadata)
        try rootDirectory.replace(RecoveryFile.nextFileName, with: sealed, durable: true)
    }

    /// Makes `recovery.key` the one for the store's current key (`keys`): a `recovery.key.next`
    /// made for it replaces the old file; one made for another key (a rotation that never
    /// committed) is removed. Called with the store lock held exclusively, after a rotation's
    /// commit and when a store is opened.
    static func finishRecoveryKeyRotation(in rootDirectory: Directory, keys: StoreKeys) throws(KeychainError) {
        guard let file = try rootDirectory.openFile(RecoveryFile.nextFileName) else { return }
        let current =
            file.size == RecoveryFile.size
            ? (try? RecoveryFile.authenticatedHeader(
                try file.read(count: file.size, at: 0), metadataKey: keys.metadata, path: file.path
            )
            .keyGeneration) == keyGeneration(keys) : false
        if current {
            do {
                try retryingInterrupts {
                    renameat(
                        rootDirectory.descriptor, RecoveryFile.nextFileName, rootDirectory.descriptor,
                        RecoveryFile.fileName)
                }
            } catch {
                throw Directory.writeFailed("rename", rootDirectory.path + "/" + RecoveryFile.nextFileName, error)
            }
            try rootDirectory.sync()
        } else {
            _ = try rootDirectory.remove(RecoveryFile.nextFileName, durable: true)
        }
    }

    /// The recovery key as a person writes it down (8 groups of 8 letters), and back.
    package static func recoveryKeyText(_ key: SecretBytes) -> String { RecoveryFile.text(of: key) }

    package static func recoveryKey(fromText text: String) throws(KeychainError) -> SecretBytes {
        try RecoveryFile.key(fromText: text)
    }

    package static func recoveryKey(fromTyped typed: SecretBytes) throws(KeychainError) -> SecretBytes {
        var bytes = typed.withUnsafeBytes { Array($0) }
        defer { for index in bytes.indices { bytes[index] = 0 } }
        return try RecoveryFile.key(fromTyped: bytes)
    }

    /// Whether the store at `root` has a recovery key, found without the TPM.
    package static func hasRecoveryKey(at root: String) throws(KeychainError) -> Bool {
        guard let directory = try Directory.open(root, in: nil, create: false, storeRoot: true) else { return false }
        return try directory.openFile(RecoveryFile.fileName) != nil
    }

}
