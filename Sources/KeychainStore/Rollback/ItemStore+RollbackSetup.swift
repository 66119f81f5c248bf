import Crypto
import FoundationEssentials
import KeychainVocabulary
import SystemCalls
import TPM

#if canImport(Glibc)
import Glibc
#endif

// Rollback protection at open: the manifest read and checked against the TPM counter, and the
// counter defined, found or read.
extension ItemStore {
    /// The whole manifest, refused unread when it is larger than any writer makes.
    static func readManifest(_ file: OpenFile, path: String) throws(KeychainError) -> [UInt8] {
        guard file.size <= Manifest.maximumSize else { throw oversizedManifest(path, size: file.size) }
        return try file.read(count: file.size, at: 0)
    }

    static func oversizedManifest(_ path: String, size: Int) -> KeychainError {
        KeychainError(
            .tampered,
            "\(path) is \(size) bytes, more than a manifest ever grows to (\(Manifest.maximumSize)): it was not written by TPMKeychain"
        )
    }

    /// Reads the manifest and checks it against the TPM counter's value `counter`.
    ///
    /// - Throws: ``KeychainError`` `.rolledBack` when the manifest is older than the counter (the
    ///   store, or its manifest, was put back from a copy), `.tampered` when it is missing,
    ///   damaged or ahead of the counter.
    static func loadManifest(
        _ rootDirectory: Directory, name: String, keys: StoreKeys, storeID: [UInt8], counterIndex: UInt32,
        counter: UInt64
    ) throws(KeychainError) -> RollbackGuard.State {
        let path = rootDirectory.path + "/" + name
        guard let file = try rootDirectory.openFile(name) else {
            throw KeychainError(
                .rolledBack,
                "The keychain store at \(rootDirectory.path) is rollback-protected but its manifest \(path) is missing: the store was put back from an incomplete copy, or the file was deleted. Restore the store from its newest backup, or recover it with its recovery key to accept the files as they are"
            )
        }
        let state = try Manifest.parse(
            try Self.readManifest(file, path: path), key: keys.manifest, storeID: storeID,
            counterIndex: counterIndex, path: path)
        // The epoch record is written (durably) before the counter moves: one ahead is a writer
        // that died between the two, which the next epoch completes.
        if state.epoch < counter {
            throw KeychainError(
                .rolledBack,
                "The keychain store at \(rootDirectory.path) is older than its TPM counter says (its manifest is from epoch \(state.epoch), the counter is at \(counter)): it was put back from an older copy. Its items may have been changed or deleted since; restore the newest backup, or recover the store with its recovery key to accept these files as they are"
            )
        }
        if state.epoch > counter + 1 {
            throw KeychainError(
                .tampered,
                "The manifest \(path) is ahead of the store's TPM counter (epoch \(state.epoch), counter \(counter)): the counter was replaced. Recovering the store with its recovery key accepts its files as they are"
            )
        }
        return RollbackGuard.State(manifest: state, inode: file.inode, fileName: name)
    }

    /// The counter's value, read with its authorization (the TPM authenticates the answer).
    ///
    /// - Parameter last: nothing after this read uses a TPM session in `tpm`; the read ends the one
    ///   it shares (``TPM/TPMConnection/readNVCounter(_:authValue:endingSessions:)``).
    /// - Throws: ``KeychainError`` `.rollbackCounterMissing` when the index is gone.
    static func readCounter(
        _ index: UInt32, keys: StoreKeys, tpm: TPMConnection, store: String, last: Bool = false
    ) throws(KeychainError) -> UInt64 {
        // Defined by the store as below: the read names it without NV_ReadPublic, checked by its HMAC.
        tpm.expectNVIndex(index, kind: .counter, options: .noDictionaryAttack)
        do {
            return try tpm.readNVCounter(index, authValue: counterAuthorization(keys), endingSessions: last)
        } catch let error as TPMError where error.code == .handleNotFound || error.code == .nvIndexUninitialized {
            throw counterMissing(index, store: store, underlying: error)
        } catch let error as TPMError {
            throw KeychainError(tpmError: error, store: store)
        } catch {
            throw KeychainError(
                .tpmUnavailable, "The TPM failed while reading the keychain's rollback counter", underlying: error)
        }
    }

    static func counterMissing(_ index: UInt32, store: String, underlying: (any Error)? = nil) -> KeychainError {
        KeychainError(
            .rollbackCounterMissing,
            "The rollback counter of the keychain at \(store) (TPM NV index 0x\(String(index, radix: 16))) is gone: the TPM was cleared or the index was deleted, so the store's files can no longer be proven current. If the store has a recovery key, recovering with it accepts the files as they are and creates a new counter; without one, accepting the rollback risk does the same (older copies put back before that are then accepted too)",
            underlying: underlying)
    }

    static func counterAuthorization(_ keys: StoreKeys) -> SecretBytes {
        keys.counterAuthorization.withUnsafeBytes { SecretBytes(copying: $0) }
    }

    /// Defines a new counter for the store (NO_DA: its authorization is a 256-bit key) and moves
    /// it once so it can be read. - Returns: its index and value.
    ///
    /// - Throws: ``KeychainError`` `.notAvailable` when the TPM has no room or no usable owner
    ///   hierarchy, or a TPM error.
    static func defineCounter(
        keys: StoreKeys, tpm: TPMConnection, store: String
    ) throws(KeychainError) -> (index: UInt32, value: UInt64) {
        let authorization = counterAuthorization(keys)
        for index in counterCandidates(keys) {
            do {
                try tpm.defineNVIndex(index, kind: .counter, authValue: authorization, options: .noDictionaryAttack)
            } catch let error as TPMError where error.code == .nvIndexAlreadyDefined {
                continue
            } catch let error as TPMError where error.code == .nvSpaceExhausted || error.code == .outOfResources {
                throw KeychainError(
                    .notAvailable, "The TPM has no room for the keychain's rollback counter", underlying: error)
            } catch let error as TPMError {
                throw KeychainError(tpmError: error, store: store)
            } catch {
                throw KeychainError(
                    .tpmUnavailable, "The TPM failed while defining the keychain's rollback counter", underlying: error)
            }
            do {
                try tpm.incrementNVCounter(index, authValue: authorization)
                return (index, try tpm.readNVCounter(index, authValue: authorization))
            } catch {
                try? tpm.undefineNVIndex(index)
                throw KeychainError(
                    .tpmUnavailable, "The TPM failed while starting the keychain's rollback counter", underlying: error)
            }
        }
        throw KeychainError(
            .notAvailable,
            "No free NV index for the keychain's rollback counter in 0x\(String(counterRange.lowerBound, radix: 16))-0x\(String(counterRange.upperBound - 1, radix: 16))"
        )
    }

    /// The handles a store's counter may have, in the order they are tried: derived from the
    /// store's keys (HMAC-SHA256 under the counter's authorization), so that a store found without
    /// a counter can ask whether it had one (``counterOnceDefined(keys:tpm:)``).
    static func counterCandidates(_ keys: StoreKeys, in range: Range<UInt32> = counterRange) -> [UInt32] {
        (0..<UInt8(16)).map { attempt in
            let mac = Array(
                HMAC<SHA256>.authenticationCode(
                    for: Array("TPMKeychain rollback counter index".utf8) + [attempt],
                    using: keys.counterAuthorization))
            let value = UInt32(mac[0]) << 24 | UInt32(mac[1]) << 16 | UInt32(mac[2]) << 8 | UInt32(mac[3])
            return range.lowerBound + value % UInt32(range.count)
        }
    }

    /// A counter this store made, found at one of its candidate handles in either range (it
    /// answers the store's authorization, which no one else has): nil when there is none. A store
    /// whose metadata names no counter but that has one is a copy from before its counter existed.
    /// One listing per range says which candidates are defined at all, so a TPM without them
    /// answers in two commands rather than thirty-two reads.
    static func counterOnceDefined(keys: StoreKeys, tpm: TPMConnection) -> UInt32? {
        let authorization = counterAuthorization(keys)
        for range in [counterRange, legacyCounterRange] {
            // When the listing fails, every candidate is asked: a missed counter would let a
            // pre-counter copy in.
            let defined = try? tpm.definedNVIndices(in: range)
            let found = counterCandidates(keys, in: range).first { candidate in
                (defined?.contains(candidate) ?? true)
                    && (try? tpm.readNVCounter(candidate, authValue: authorization)) != nil
            }
            if let found { return found }
        }
        return nil
    }

    /// A new manifest `name` in epoch `epoch`, listing every item of `layout` as it is now (none
    /// for a new store): for a new store, for one that gets its counter, after a rotation and after
    /// a recovery.
    /// - Returns: how many items it lists.
    @discardableResult
    static func writeManifest(
        _ name: String, listing layout: Layout?, in rootDirectory: Directory, keys: StoreKeys, storeID: [UInt8],
        counterIndex: UInt32, epoch: UInt64
    ) throws(KeychainError) -> Int {
        var entries: [Manifest.ItemKey: Manifest.Entry] = [:]
        var highWater: UInt64 = 0
        if let layout, layout.version == 2 {
            for group in try layout.items.entries() where !group.hasPrefix(".") {
                guard let directory = try Directory.open(group, in: layout.items, create: false) else { continue }
                for name in try directory.entries() {
                    guard let key = Manifest.ItemKey(fileName: name), let file = try directory.openFile(name),
                        file.size >= ItemFileV2.headerSize
                    else { continue }
                    let header = try ItemFileV2.decodeHeader(
                        try file.read(count: ItemFileV2.headerSize, at: 0)[...], fileSize: file.size,
                        storeID: storeID, path: file.path)
                    entries[key] = Manifest.Entry(generation: header.generation, live: true, group: group)
                    highWater = max(highWater, header.generation)
                }
            }
        }
        let state = Manifest.State(
            storeID: storeID, counterIndex: counterIndex, highWater: highWater, epoch: epoch, entries: entries,
            lastMAC: [], validSize: 0)
        try rootDirectory.replace(name, with: Manifest.compacted(state, key: keys.manifest), durable: true)
        return entries.count
    }
}
