import KeychainStore
package import KeychainVocabulary
package import TPM

// Keys that live in the TPM, as key items: made under an item's protection, used (signing, key
// agreement) only after that protection is satisfied, never returned.
extension ItemService {
    /// Makes a P-256 key in the TPM and stores it as a key item: `attributes` gives the item's
    /// attributes (its primary key included) from the new key's public key (X9.63).
    ///
    /// - Parameter control: the key's access control (nil: under the master key, usable whenever
    ///   the store is open). `enrollment` as for ``write(_:primary:mode:value:changes:control:enrollment:key:)``.
    /// - Returns: the stored item's public key.
    /// - Throws: ``KeychainError`` `.duplicateItem`, `.passcodeNotSet`, `.biometryNotEnrolled`,
    ///   `.tpmUnavailable` and the other errors of a protected write.
    package func createTPMKey(
        _ usage: TPMKeyUsage, control: AccessControl?, enrollment: [UInt8]?, forKeyFile: Bool = false,
        attributes: (_ publicKey: [UInt8]) -> AttributeList
    ) throws(KeychainError) -> [UInt8] {
        let protection = control.map(Protection.init)
        return try Devices.with(location) { (device) throws(KeychainError) in
            let (value, record) = try store.makeTPMKey(
                usage, device: device, protection: protection, enrollmentIdentifier: enrollment,
                forKeyFile: forKeyFile)
            var changes = AttributeChanges()
            changes.accessibility = control?.accessibility
            let primary = attributes(value.key.publicKey)
            // Decided once the attributes, which name the group, exist: the key made so far is
            // only in memory, and a refused one is dropped unstored.
            try authorize(.write, group: Self.group(of: primary))
            try store.write(
                .key, primary: primary, mode: .add, value: ItemValue(kind: .tpmKey, bytes: value.serialized()),
                changes: changes,
                access: record.map { ItemStore.AccessWrite(protection: protection, device: device, record: $0) })
            return value.key.publicKey
        }
    }

    /// Signs `digest` with the TPM key the item holds (ECDSA; r ‖ s). `key` is the item's opened
    /// record key for a protected item (``openKey(for:context:allowsInteraction:)``).
    ///
    /// - Throws: ``KeychainError`` `.invalidParameter` for an item that holds no TPM signing key,
    ///   `.interactionNotAllowed` for a protected one without its key, `.itemInvalidated` once
    ///   the TPM refuses it for an enrollment change, `.tampered`.
    package func sign(digest: [UInt8], with result: ItemQueryResult, key: OpenedKey?) throws(KeychainError) -> [UInt8] {
        try recordingUse("sign", of: result) { () throws(KeychainError) in
            try signUnrecorded(digest: digest, with: result, key: key)
        }
    }

    private func signUnrecorded(
        digest: [UInt8], with result: ItemQueryResult, key: OpenedKey?
    ) throws(KeychainError) -> [UInt8] {
        try withTPMKey(result, key: key, usage: .signing) { connection, value, policy, authorizations in
            try connection.sign(
                digest, with: value.key, policy: policy, authValue: value.authValue, nvAuthorizations: authorizations)
        }
    }

    /// Signs as ``sign(digest:with:key:)``, opening a protected key's record only when that
    /// needs no person (a key bound to the lock state, which the TPM checks, or to nothing): for
    /// a face that cannot ask anyone yet (the ssh agent).
    ///
    /// - Throws: as ``sign(digest:with:key:)``; `.interactionNotAllowed` for a key that needs
    ///   biometry or the passcode, and while the keychain or the login session is locked for it.
    package func signNeedingNoPerson(digest: [UInt8], with result: ItemQueryResult) throws(KeychainError) -> [UInt8] {
        try recordingUse("sign", of: result) { () throws(KeychainError) in
            guard result.isProtected else { return try signUnrecorded(digest: digest, with: result, key: nil) }
            try authorize(.readSecret, group: Self.group(of: result.attributes), item: result)
            let recordKey = try recordKeyNeedingNoPerson(
                try store.protection(ofRecord: result.keyRecord),
                person: "The key needs biometry or the device passcode, which this face cannot ask for")
            return try signUnrecorded(digest: digest, with: result, key: OpenedKey(recordKey: recordKey))
        }
    }

    /// Runs one use of the TPM key `result` holds and records it, done or refused, in the
    /// owner's ``KeyUseLog``: every face's use passes here.
    func recordingUse<R>(
        _ operation: String, of result: ItemQueryResult, _ body: () throws(KeychainError) -> R
    ) throws(KeychainError) -> R {
        let label = result.attributes.string(AttributeTag.label) ?? ""
        do {
            let value = try body()
            KeyUseLog.record(operation, label: label, caller: caller, outcome: "done")
            return value
        } catch {
            KeyUseLog.record(operation, label: label, caller: caller, outcome: "refused: " + error.message)
            throw error
        }
    }

    /// The ECDH shared secret (the x-coordinate) of the TPM key the item holds and `peerPublicKey`
    /// (X9.63), computed in the TPM.
    ///
    /// - Throws: as ``sign(digest:with:key:)``; `.invalidParameter` for a public key not on P-256.
    package func sharedSecret(
        with peerPublicKey: [UInt8], using result: ItemQueryResult, key: OpenedKey?
    ) throws(KeychainError) -> SecretBytes {
        try recordingUse("key agreement", of: result) { () throws(KeychainError) in
            try sharedSecretUnrecorded(with: peerPublicKey, using: result, key: key)
        }
    }

    private func sharedSecretUnrecorded(
        with peerPublicKey: [UInt8], using result: ItemQueryResult, key: OpenedKey?
    ) throws(KeychainError) -> SecretBytes {
        try withTPMKey(result, key: key, usage: .keyAgreement) { connection, value, policy, authorizations in
            try connection.sharedSecret(
                with: peerPublicKey, using: value.key, policy: policy, authValue: value.authValue,
                nvAuthorizations: authorizations)
        }
    }

    /// The item's TPM key as a TPM 2.0 Key File ("TSS2 PRIVATE KEY" PEM), which the tpm2 OpenSSL
    /// provider and ssh-tpm-agent load on this TPM. `key` as for ``sign(digest:with:key:)``.
    ///
    /// - Throws: ``KeychainError`` `.invalidParameter` for an item that holds no TPM key, or one
    ///   not made for key files (``ItemStore/makeTPMKey(_:device:protection:enrollmentIdentifier:forKeyFile:)``),
    ///   whose authorization the file could not carry; `.interactionNotAllowed` and the reading errors.
    package func keyFile(of result: ItemQueryResult, key: OpenedKey?) throws(KeychainError) -> String {
        try recordingUse("key file export", of: result) { () throws(KeychainError) in
            let value = try tpmKey(of: result, key: key)
            guard value.key.isWritableAsKeyFile, value.authValue.count == 0 else {
                throw KeychainError(
                    .invalidParameter,
                    "The key was not made for key files: its authorization and parent are the keychain's own, which other tools cannot use (make one with tpm-keychain key create --key-file, or kSecAttrTPMKeyFile)"
                )
            }
            do throws(TPMError) {
                return try value.key.tss2KeyFile(emptyAuth: true)
            } catch {
                throw KeychainError(.invalidParameter, error.message)
            }
        }
    }

    /// The TPM key an item holds, when it holds one: its usage and public key, without a person
    /// (a protected item's public key is in its attributes).
    package static func holdsTPMKey(_ result: ItemQueryResult) -> Bool {
        result.itemClass == .key && result.kind == .tpmKey
    }

    private func withTPMKey<R>(
        _ result: ItemQueryResult, key: OpenedKey?, usage: TPMKeyUsage,
        _ body: (TPMConnection, TPMKeyValue, Policy, [UInt32: SecretBytes]) throws -> R
    ) throws(KeychainError) -> R {
        let value = try tpmKey(of: result, key: key)
        guard usage == .signing ? value.key.usage.signs : value.key.usage.agreesOnKeys else {
            throw KeychainError(
                .invalidParameter,
                usage == .signing ? "The key is a key-agreement key and does not sign" : "The key is a signing key")
        }
        let recordID = result.isProtected ? result.keyRecord : nil
        return try Devices.with(location) { (device) throws(KeychainError) in
            try store.useTPMKey(value, recordID: recordID, device: device) { connection, policy, authorizations in
                try body(connection, value, policy, authorizations)
            }
        }
    }

    /// The TPM key the item holds, read after the decision: using a key is reading its secret,
    /// though the secret never leaves the TPM.
    ///
    /// - Throws: ``KeychainError`` `.invalidParameter` for an item that holds no TPM key,
    ///   `.itemNotFound` once it was deleted, the decision's refusals and the reading errors.
    private func tpmKey(of result: ItemQueryResult, key: OpenedKey?) throws(KeychainError) -> TPMKeyValue {
        try authorize(.readSecret, group: Self.group(of: result.attributes), item: result)
        guard Self.holdsTPMKey(result) else {
            throw KeychainError(.invalidParameter, "The item holds no key that lives in the TPM")
        }
        // A result read with its value (an unprotected key's blob) is not read again: a face that
        // writes the item meanwhile (a passkey's sign count) then does not hold up the TPM's work.
        var secret = result.isProtected ? nil : result.value
        if secret == nil { secret = try store.secret(of: result, recordKey: key?.recordKey) }
        guard let secret else {
            throw KeychainError(.itemNotFound, "The key item was deleted")
        }
        return try TPMKeyValue(parsing: secret)
    }
}
