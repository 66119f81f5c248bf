import KeychainVocabulary
import TPMKeychain

// A collection's lock: Lock() and unlock, the access control its unlock asks for (the prompt's
// side of it runs in the provider), and the collection's properties item, where that control,
// its label and its rules are kept.
extension SecretCollection {
    /// Locked: by Lock(), or because its access control's key is not open. A store that cannot
    /// be opened counts as locked.
    var isLocked: Bool {
        lockedByRequest || !isOpen || isLockedByItsControl
    }

    /// Whether the store is open and its index built; opens it on first use. Unlike
    /// ``currentIndex()`` it does not look for other processes' changes (a call has already
    /// looked, finding its collection or item), so a call asks the file system once, not at
    /// every check.
    var isOpen: Bool {
        index != nil || (try? currentIndex()) != nil
    }

    /// Locks: opened keys are forgotten (the next unlock asks again).
    func lock() {
        lockedByRequest = true
        openedKeys = [:]
    }

    /// Unlocks a collection without access control; false when its access control must be
    /// satisfied first (``unlockRequest()``, then ``completeUnlock(_:)``).
    func unlockWithoutPrompt() -> Bool {
        guard accessControl == nil || !isLockedByItsControl else {
            return false
        }
        lockedByRequest = false
        return true
    }

    private var isLockedByItsControl: Bool {
        guard accessControl != nil, let record = propertiesItem?.keyRecord else { return false }
        return openedKeys[record] == nil
    }

    /// What an unlock prompt needs, off the loop thread.
    struct UnlockRequest: Sendable {
        let service: ItemService
        let control: AccessControl
        let records: [ItemQueryResult]
        let label: String
    }

    /// What an unlock prompt produced.
    struct UnlockedKeys: Sendable {
        let keys: [[UInt8]: ItemService.OpenedKey]
        let enrollment: [UInt8]?
    }

    /// The key records to open (the properties item's, and any other its items use).
    func unlockRequest() throws(SecretServiceError) -> UnlockRequest? {
        let current = try currentIndex()
        guard let accessControl, let service, let propertiesItem else { return nil }
        var records = [propertiesItem]
        var seen: Set<[UInt8]> = [propertiesItem.keyRecord]
        for item in current.search([:]) where item.isProtected && !seen.contains(item.keyRecord) {
            seen.insert(item.keyRecord)
            do {
                if let found = try service.item(
                    .genericPassword, primary: AttributeList(item.identity), withSecret: false)
                {
                    records.append(found)
                }
            } catch {
                throw SecretServiceError(error)
            }
        }
        return UnlockRequest(service: service, control: accessControl, records: records, label: label)
    }

    func completeUnlock(_ unlocked: UnlockedKeys) {
        openedKeys.merge(unlocked.keys) { $1 }
        enrollment = unlocked.enrollment ?? enrollment
        lockedByRequest = false
    }

    /// Sets a new collection up: its label, and the access control its items get (kept as the
    /// protection of its properties item, whose key record every item then shares).
    func setUp(
        label: String, accessControl control: AccessControl?, enrollment: [UInt8]?, allowedExecutables: [String]?,
        confirmsEachAccess: Bool
    ) throws(SecretServiceError) {
        _ = try currentIndex()
        guard let service else { return }
        self.allowedExecutables = allowedExecutables
        self.confirmsEachAccess = confirmsEachAccess
        do {
            try service.write(
                .genericPassword, primary: propertiesPrimary(label: label), mode: .upsert,
                value: ItemValue(kind: .data, bytes: [0]), control: control, enrollment: enrollment)
        } catch {
            throw SecretServiceError(error)
        }
        fingerprint = [] // rebuild: the properties item tells the access control
        _ = try currentIndex()
    }

    func propertiesPrimary(label: String) -> AttributeList {
        var primary = AttributeList(
            ItemIdentity(unchecked: "", SecretItemMapping.collectionService, "properties"))
        primary.setString(label, for: AttributeTag.label)
        if confirmsEachAccess { primary.setBool(true, for: SecretItemMapping.confirmEachAccessTag) }
        if let allowedExecutables {
            // A client may name a path twice: the set keeps it once.
            primary[SecretItemMapping.allowedExecutablesTag] = SecretItemMapping.encode(
                Dictionary(uniqueKeysWithValues: Set(allowedExecutables).map { ($0, "") }))
        }
        return primary
    }

    /// Closes the store: its keys leave memory.
    func close() {
        if let service { Keychain.closeStore(service.location) }
        service = nil
        index = nil
    }
}
