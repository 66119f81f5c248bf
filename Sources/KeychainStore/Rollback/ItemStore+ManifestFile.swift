import Crypto
import FoundationEssentials
import KeychainVocabulary
import SystemCalls
import TPM

#if canImport(Glibc)
import Glibc
#endif

// The manifest file: read again when another process appended or compacted it, appended to
// under its lock.
extension ItemStore {
    /// Reads what other processes appended (or the whole file, when it was compacted or replaced).
    ///
    /// - Parameter writable: open the manifest for writing as well, for an append under its lock.
    /// - Returns: the manifest as opened, or nil when this store keeps none or another process
    ///   rotated its keys (the new manifest has another name).
    @discardableResult
    func refreshManifest(writable: Bool = false, reusing held: OpenFile? = nil) throws(KeychainError) -> OpenFile? {
        guard
            let (fileName, inode, validSize, counterIndex, epoch) = rollback.position
        else { return nil }
        var reopened: OpenFile?
        if let held { reopened = try rootDirectory.reopenFile(fileName, heldAs: held) }
        if reopened == nil { reopened = try rootDirectory.openFile(fileName, writable: writable) }
        guard let file = reopened else {
            // Another process rotated the master key: its manifest has the new key's name.
            if try refreshIfRotated(try current()) { return nil }
            throw KeychainError(
                .rolledBack,
                "The manifest \(root)/\(fileName) of this rollback-protected store disappeared: the store was put back from an incomplete copy, or the file was deleted"
            )
        }
        let keys = try current().keys
        // The name the descriptor was opened by, formatted when it was opened.
        let path = file.path
        if file.inode != inode || file.size < validSize {
            let reloaded = try Manifest.parse(
                try Self.readManifest(file, path: path), key: keys.manifest, storeID: storeID,
                counterIndex: counterIndex, path: path)
            guard reloaded.epoch >= epoch else {
                throw KeychainError(
                    .rolledBack,
                    "The manifest \(path) was replaced by an older copy (epoch \(reloaded.epoch), this process has seen \(epoch))"
                )
            }
            rollback.adopt(reloaded, inode: file.inode)
        } else if file.size > validSize {
            guard file.size <= Manifest.maximumSize else { throw Self.oversizedManifest(path, size: file.size) }
            let tail = try file.read(count: file.size - validSize, at: validSize)
            if let error = rollback.apply(tail[...], at: validSize, macs: keys.manifestMAC, path: path) { throw error }
        }
        return file
    }

    /// Writes `records` at the end of what this handle has read (the caller holds the manifest's
    /// lock and has just refreshed) and applies them: through `manifest`, the descriptor that
    /// refresh opened under the lock, or by name when there is none.
    func appendLocked(
        _ records: [Manifest.Record], durable: Bool, keys: StoreKeys, through manifest: OpenFile? = nil
    ) throws(KeychainError) {
        guard
            let (fileName, validSize, lastMAC, inode) = rollback.appendPosition
        else { return }
        let bytes = Manifest.encode(records, after: lastMAC, macs: keys.manifestMAC)
        if let manifest, manifest.inode == inode {
            try manifest.write(bytes, at: validSize, durable: durable)
        } else {
            try rootDirectory.overwrite(fileName, at: validSize, with: bytes, durable: durable)
        }
        let error = rollback.apply(
            bytes[...], at: validSize, macs: keys.manifestMAC, path: root + "/" + fileName, encodedAfter: lastMAC)
        if let error { throw error }
    }
}
