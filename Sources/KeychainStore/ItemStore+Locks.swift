import KeychainVocabulary
import SystemCalls

// The two locks of every write, with their descriptors lent from the store's ``LockPool``.
extension ItemStore {
    /// The pool key of the store's own lock (group names are 32 hex digits).
    private static let storeLockKey = ""

    /// Takes the store's lock shared, as every write does: a rotation, an upgrade or a purge
    /// takes it exclusive. Give it back with ``unlock(_:pooledAs:in:)``.
    ///
    /// - Throws: ``KeychainError`` `.timedOut`, `.storageFailed`.
    func lockStoreForWriting() throws(KeychainError) -> LockFile {
        let lent = lockPool.lend(Self.storeLockKey, in: rootDirectory)
        let file: LockFile
        if let lent { file = lent } else { file = try rootDirectory.openLockOnItself() }
        try rootDirectory.relockItself(file, timeout: lockTimeout, purpose: "writing to it", shared: true)
        return file
    }

    /// Lets the store's lock go, keeping its descriptor for the next write.
    func unlockStore(_ file: LockFile) {
        unlock(file, pooledAs: Self.storeLockKey, in: rootDirectory)
    }

    /// Takes the lock of the group directory `directory`, named `group`: its `.lock` file,
    /// exclusive. Give it back with ``unlock(_:pooledAs:in:)``.
    ///
    /// - Throws: ``KeychainError`` `.timedOut`, `.unsafeFileSystem`, `.storageFailed`.
    func lockGroup(_ directory: Directory, named group: String) throws(KeychainError) -> LockFile {
        let lent = lockPool.lend(group, in: directory)
        let file: LockFile
        if let lent { file = lent } else { file = try directory.openLock(".lock") }
        try directory.relock(file, named: ".lock", timeout: lockTimeout)
        return file
    }

    /// Lets a lock go, keeping its descriptor for the next holder.
    func unlock(_ file: LockFile, pooledAs key: String, in directory: Directory) {
        file.unlock()
        lockPool.giveBack(file, key, in: directory)
    }
}
