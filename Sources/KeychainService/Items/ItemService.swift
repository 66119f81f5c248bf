import KeychainStore
package import KeychainVocabulary

/// The one way above the store engine to a store's items, for every face: `Keychain`, SecItem
/// (SecurityCompat), the command-line tools, and what comes next (a Secret Service daemon, key
/// APIs). Faces speak the vocabulary (``ItemClass``, ``AttributeList``, ``AccessControl``,
/// ``KeychainError``); the engine's types stay behind this service.
///
/// Protection is decided here and nowhere else: whether an item gets a key record or stays under
/// the master key, which device holds the passcode and enrollment, and which enrollment a
/// `biometryCurrentSet` item binds to (``enrollment(binding:authenticator:)``).
///
/// Who may do what is decided here too, for every face: each operation asks
/// ``AccessDecision/decide(_:by:on:)`` for the service's ``caller`` before it acts, and what a
/// search finds is only what the caller may see. A face names its caller and checks nothing
/// itself (ItemService+Decision.swift).
///
/// A service is a handle on the store the location names, opened once per process (one TPM
/// unseal, shared with every other user of the location); it is cheap to make.
///
/// Where a session holder runs (``SessionHolder``), a short-lived process's reads of items under
/// the master key are answered by it with no TPM command, and the store is opened here only when
/// something else is asked (the warm path, docs/ARCHITECTURE.md).
package struct ItemService: Sendable {
    package let location: KeychainLocation
    /// Who is asking, as its face knows it: every operation is decided for this caller.
    package let caller: AccessCaller
    /// The store, opened when the service was made; nil while reads go to the session holder.
    let openedStore: ItemStore?

    /// The store at `location`, opened (unsealed) on first use in this process, for `caller`.
    ///
    /// - Throws: ``KeychainError`` from opening the store: `.tpmUnavailable`, `.wrongTPM`,
    ///   `.tampered`, `.unsafeFileSystem`, `.storeNotFound` and the rest of ``KeychainLocation``'s.
    ///   With a session holder, those come from the first operation the holder does not answer.
    package init(location: KeychainLocation, caller: AccessCaller) throws(KeychainError) {
        self.location = location
        self.caller = caller
        // Open here already: one lookup, as before there was a holder (a get's hot path).
        if let open = OpenStores.openStore(at: location) {
            openedStore = open
        } else {
            openedStore = SessionHolder.mayServe(caller, at: location) ? nil : try OpenStores.store(at: location)
        }
    }

    /// The same store for another caller: opened, or still left to the holder, as `openedStore` says.
    init(location: KeychainLocation, caller: AccessCaller, openedStore: ItemStore?) {
        self.location = location
        self.caller = caller
        self.openedStore = openedStore
    }

    /// The open store: the one opened when the service was made, else this process's, opened now.
    var store: ItemStore {
        get throws(KeychainError) {
            if let openedStore { return openedStore }
            return try OpenStores.store(at: location)
        }
    }

    /// The session holder's answer to `read` for this caller; nil when this service opened its
    /// store itself, or the holder does not answer (then the caller's own path runs).
    private func warm(_ read: (HolderRequest.HolderStore) -> HolderRequest) -> HolderResponse? {
        guard openedStore == nil, !OpenStores.isOpen(location),
            let target = SessionHolder.store(for: location, caller: caller), SessionHolder.mayAskAgain()
        else { return nil }
        return SessionHolder.ask(read(target))
    }

    /// The holder's answer to a query; nil to run it here.
    func warmResults(_ query: ItemQuery) -> [ItemQueryResult]? {
        guard case .results(let results) = warm({ .query($0, HolderRequest.HolderQuery(query)) }) else { return nil }
        return results
    }

    /// The holder's answer for the secret of `result`, an item under the master key found
    /// without its secret: the item its primary key names, found again with its secret (the
    /// same item: its reference); nil to read it here.
    func warmSecret(of result: ItemQueryResult) -> [UInt8]? {
        var matching = AttributeList()
        for tag in result.itemClass.primaryKey where tag != AttributeTag.synchronizable {
            matching[tag] = result.attributes[tag]
        }
        let query = ItemQuery(itemClass: result.itemClass, matching: matching, synchronizable: .any, returnsData: true)
        return warmResults(query)?.first { $0.reference == result.reference }?.value
    }

    /// The holder's answer to a generic password's value; nil to read it here.
    func warmValue(_ identity: ItemIdentity) -> ItemValue?? {
        guard case .value(let value) = warm({ .value($0, identity) }) else { return nil }
        return .some(value)
    }

    // MARK: Finding

    /// The items `query` matches, in creation order (Apple's match-limit-all order).
    ///
    /// - Throws: ``KeychainError`` `.tampered` for a damaged or misplaced file met on the way.
    package func query(_ query: ItemQuery) throws(KeychainError) -> [ItemQueryResult] {
        if let results = warmResults(query) { return results }
        try authorize(query.returnsData ? .readSecret : .readMetadata, namedIn: query.matching)
        return try store.query(query).filter(visible)
    }

    /// The items of `itemClass` that have every attribute `matching` gives, with those values
    /// (the rest match anything), in creation order; protected ones included
    /// (``ItemQueryResult/isProtected``).
    ///
    /// - Parameter synchronizable: Apple's rule for `sync` (``ItemQuery/Synchronizable``); any by default.
    package func query(
        _ itemClass: ItemClass, matching: AttributeList,
        synchronizable: ItemQuery.Synchronizable = .any
    ) throws(KeychainError) -> [ItemQueryResult] {
        try query(ItemQuery(itemClass: itemClass, matching: matching, synchronizable: synchronizable, limit: .all))
    }

    /// Every item of every class, without secrets, one at a time as the store reads them: for a
    /// walk over the whole store (an export) whose memory must not grow with it.
    ///
    /// - Throws: ``KeychainError`` `.tampered` for a damaged, misplaced or missing file, and what `body` throws.
    package func forEachItem(_ body: (ItemQueryResult) throws(KeychainError) -> Void) throws(KeychainError) {
        try store.forEachItem { (result) throws(KeychainError) in
            if visible(result) { try body(result) }
        }
    }

    /// The item a persistent reference names, or nil when it is gone.
    package func item(reference: [UInt8]) throws(KeychainError) -> ItemQueryResult? {
        try store.item(reference: reference).flatMap { visible($0) ? $0 : nil }
    }

    /// The item of `itemClass` that `primary` names, read by its file name (no directory scan);
    /// with its secret when `withSecret` and the item is under the master key.
    package func item(
        _ itemClass: ItemClass, primary: AttributeList, withSecret: Bool
    ) throws(KeychainError) -> ItemQueryResult? {
        if case .results(let found) = warm({ .item($0, itemClass, primary: primary, withSecret: withSecret) }),
            found.count <= 1
        {
            return found.first
        }
        try authorize(withSecret ? .readSecret : .readMetadata, group: Self.group(of: primary))
        return try store.item(itemClass, primary: primary, withSecret: withSecret)
    }

    /// Changes whenever any process adds, replaces or removes an item of the store: for faces
    /// that keep their own view of the items (the Secret Service's index) and rebuild it on change.
    /// Empty when the store cannot be opened.
    package func changeStamp() -> [Int64] {
        (try? store)?.changeStamp() ?? []
    }

    // MARK: Writing

    /// Writes the item `primary` names (absent primary-key attributes count as empty; what else
    /// `primary` holds is set too, and attributes the item has and the write does not name are
    /// kept).
    ///
    /// - `control` nil: the item keeps the protection it has (a new one: the master key). A
    ///   protected item whose value is kept needs `key`, its opened record key.
    /// - `control` given: the item is protected by it. Items that need a person, and items whose
    ///   class depends on the lock state while a device passcode is set, get a key record; the
    ///   others stay under the master key, as on an iPhone without a passcode, and the write sends
    ///   no TPM command. `enrollment` is what ``enrollment(binding:authenticator:)`` gave.
    ///
    /// - Throws: ``KeychainError`` `.duplicateItem` (mode `.add`), `.itemNotFound` (mode
    ///   `.update`), `.passcodeNotSet`, `.biometryNotEnrolled`, `.invalidParameter` (sizes),
    ///   `.tampered`, `.timedOut`, `.storageFailed`.
    package func write(
        _ itemClass: ItemClass, primary: AttributeList, mode: ItemWriteMode, value: ItemValue?,
        changes: AttributeChanges = AttributeChanges(), control: AccessControl? = nil, enrollment: [UInt8]? = nil,
        key: OpenedKey? = nil
    ) throws(KeychainError) {
        try authorize(.write, group: Self.group(of: primary))
        var changes = changes
        if let control, control.flags.contains(.privateKeyUsage), itemClass != .key {
            throw KeychainError(
                .invalidParameter, ".privateKeyUsage applies to a key's private-key operations, not to a password item")
        }
        guard let control else {
            guard let key else {
                try authorizeRewrite(itemClass, primary: primary)
                return try store.write(itemClass, primary: primary, mode: mode, value: value, changes: changes)
            }
            return try Devices.with(location) { (device) throws(KeychainError) in
                try store.write(
                    itemClass, primary: primary, mode: mode, value: value, changes: changes,
                    access: ItemStore.AccessWrite(protection: nil, device: device, recordKey: key.recordKey))
            }
        }
        changes.accessibility = control.accessibility
        let protection = Protection(control)
        let location = location
        let passcodeSet = { () throws(KeychainError) in try Devices.passcodeIsSet(location) }
        if try !protection.needsKeyRecord(passcodeSet: passcodeSet) {
            // Nothing to bind to: the class is an authenticated label, as on an iPhone without a passcode.
            return try store.write(itemClass, primary: primary, mode: mode, value: value, changes: changes)
        }
        // Adding while locked works, as on iOS; replacing a lock-bound item does not.
        try authorizeRewrite(itemClass, primary: primary)
        try Devices.with(location) { (device) throws(KeychainError) in
            try store.write(
                itemClass, primary: primary, mode: mode, value: value, changes: changes,
                access: ItemStore.AccessWrite(
                    protection: protection, device: device, enrollmentIdentifier: enrollment,
                    recordKey: key?.recordKey))
        }
    }

    /// The enrollment a write under `control` binds the item to: what `authenticator` reports
    /// enrolled now, for `biometryCurrentSet`; nil for every other control (no authenticator asked).
    ///
    /// - Throws: ``KeychainError`` from the authenticator (`.notAvailable`, `.biometryNotEnrolled`).
    package static func enrollment(
        binding control: AccessControl, authenticator: (any Authenticator)?
    ) async throws(KeychainError) -> [UInt8]? {
        guard bindsEnrollment(control), let authenticator else { return nil }
        do {
            return try await authenticator.enrollment()?.identifier
        } catch {
            throw KeychainError(error)
        }
    }

    /// Whether a write under `control` binds to the enrollment (so needs ``enrollment(binding:authenticator:)``).
    package static func bindsEnrollment(_ control: AccessControl) -> Bool {
        Protection(control).biometry == .currentSet
    }

    /// Deletes the item of `itemClass` whose primary key `attributes` hold (a query result's
    /// attributes name their item).
    ///
    /// - Returns: false when it was gone already.
    /// - Throws: ``KeychainError`` `.timedOut`, `.storageFailed`.
    package func delete(_ itemClass: ItemClass, primary attributes: AttributeList) throws(KeychainError) -> Bool {
        let group = Self.group(of: attributes)
        try authorize(.delete, group: group)
        if deviceMayLock() {
            // A missing or damaged item protects nothing: removing a damaged one is its remedy.
            let existing = try? store.item(itemClass, primary: attributes, withSecret: false)
            try authorizeDelete(
                group: group, accessibilities: existing.flatMap { $0.isProtected ? [$0.accessibility] : nil } ?? [])
        }
        return try store.delete(itemClass, primary: attributes)
    }
}
