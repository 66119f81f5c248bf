internal import CTSS2
import Crypto
import SystemCalls
import WireFormat

/// A connection to one TPM through tpm2-tss's ESAPI.
///
/// Safe to share between threads and tasks: ESAPI contexts are not thread-safe, so every call
/// runs under one lock. When the TPM has no resource manager (swtpm, `/dev/tpm0`) the connection
/// also holds a cross-process lock for its whole life, so processes sharing that TPM take turns;
/// open it for a unit of work and ``close()`` it promptly.
///
/// Every command that carries a secret (sealing, unsealing, PINs, NV data, TPM random bytes)
/// runs in a session salted with the storage key, with parameter encryption on.
public final class TPMConnection: Sendable {
    public let configuration: TPMConfiguration
    private let engine: Locked<Engine?>

    /// Connects to the TPM `configuration` names.
    ///
    /// - Throws: ``TPMError`` `.tpmUnavailable` naming the TCTI that was tried, or `.busy` when
    ///   another process holds a TPM without resource manager for too long.
    /// - Parameter storageKeyContextCache: where to keep the storage key's TPM context between
    ///   processes, to skip deriving it again (see ``StorageKeyContextCache``); nil derives it per connection.
    public convenience init(
        _ configuration: TPMConfiguration = .fromEnvironment(),
        storageKeyContextCache: (any StorageKeyContextCache)? = nil
    ) throws {
        try self.init(configuration, parameterEncryption: true, storageKeyContextCache: storageKeyContextCache)
    }

    /// Tests turn parameter encryption off to show what would otherwise cross the bus.
    init(
        _ configuration: TPMConfiguration, parameterEncryption: Bool,
        storageKeyContextCache: (any StorageKeyContextCache)? = nil
    ) throws {
        self.configuration = configuration
        engine = Locked(
            try Engine(
                configuration: configuration, parameterEncryption: parameterEncryption,
                contextCache: storageKeyContextCache))
    }

    /// Flushes what this connection loaded and disconnects; later calls throw `.connectionClosed`.
    public func close() {
        engine.withLock { engine in
            // A TPM that stopped answering must not hang the close as well: the flushes are
            // bounded, and their failures only mean the handles stay for the next sweep.
            if let engine { _ = try? engine.deadline.guarding("flushing the storage key") { engine.shutDown() } }
            engine = nil
        }
    }

    /// Ends the connection as a process that dies ends it: nothing flushed, no note for the access
    /// lock's next holder.
    func abandonForTesting() {
        engine.withLock { engine in
            engine?.abandon()
            engine = nil
        }
    }

    /// Runs `body` on the engine under the connection's lock and the TPM's deadline. A command
    /// that timed out leaves ESAPI mid-command, so the connection is abandoned (closed without
    /// talking to the TPM again) and later calls throw `.connectionClosed`.
    func withEngine<R: Sendable>(_ body: (Engine) throws -> R) throws -> R {
        do {
            return try engine.withLock { (engine) throws -> R in
                guard let engine else { throw TPMError(.connectionClosed, "The TPM connection is closed") }
                let alarm = engine.deadline.arm()
                defer { alarm?.disarm() }
                do {
                    return try body(engine)
                } catch {
                    throw alarm?.translate(error, while: "waiting for a TPM command") ?? error
                }
            }
        } catch let error as TPMError where error.code == .timedOut {
            engine.withLock { engine in
                engine?.abandon()
                engine = nil
            }
            throw error
        }
    }

    // MARK: - Identity

    /// Forgets the storage-key contexts this process remembered for `tcti`, so that the next
    /// connection derives or loads the key as a new process would. A remembered context of another
    /// TPM that had the same TCTI (a simulator on a reused loopback port) costs one failed
    /// TPM2_ContextLoad; tests that count a path's commands start without one.
    package static func forgetRememberedStorageKeys(tcti: String) {
        Engine.forgetRememberedContexts(tcti: tcti)
    }

    /// Who made the TPM and whether it is a simulator.
    ///
    /// - Throws: ``TPMError`` if the TPM cannot be asked.
    public func describe() throws -> TPMDescription {
        try withEngine { engine in
            let properties = try engine.properties(from: TPMProperty.manufacturer, count: 8)
            func text(_ property: UInt32) -> String {
                guard let value = properties[property] else { return "" }
                let bytes = [24, 16, 8, 0].map { UInt8(truncatingIfNeeded: value >> $0) }.filter {
                    $0 >= 0x20 && $0 < 0x7F
                }
                return String(decoding: bytes, as: UTF8.self).trimmingSpaces
            }
            let vendor = TPMProperty.vendorStrings.map { text($0) }.joined()
            let firmware1 = properties[TPMProperty.firmwareVersion1] ?? 0
            let firmware2 = properties[TPMProperty.firmwareVersion2] ?? 0
            return TPMDescription(
                tcti: configuration.tcti,
                manufacturer: text(TPMProperty.manufacturer),
                vendor: vendor,
                firmwareVersion: firmware1.hexString(width: 8) + "." + firmware2.hexString(width: 8),
                isSimulator: configuration.isSimulator || TPMDescription.reportsSoftware(vendor: vendor))
        }
    }

    /// The name and algorithm of the storage key this TPM derives from TCG's SRK template.
    ///
    /// - Throws: ``TPMError`` if the key cannot be created.
    public func storageKey() throws -> (name: [UInt8], algorithm: StorageKeyAlgorithm) {
        try withEngine { engine in
            let key = try engine.storageKey(algorithm: nil, pinnedName: nil)
            return (key.name, key.algorithm)
        }
    }

    // MARK: - Sealing

    /// Makes a fresh 32-byte key and seals it: OS randomness and TPM randomness, combined with
    /// HKDF-SHA256, so the key is strong if either source is.
    ///
    /// - Parameters:
    ///   - policy: what unsealing will require; it must include ``PolicyAssertion/authValue`` for a PIN.
    ///   - authValue: the PIN (at most 32 bytes), or nil.
    ///   - dictionaryAttackProtected: whether failed authorizations count toward the TPM's
    ///     lockout; by default, when there is an `authValue`. A full-strength random secret
    ///     needs no such protection, and must not let someone burn the TPM's tries with it.
    /// - Returns: the key, for immediate use, and the sealed object to store.
    /// - Throws: ``TPMError``.
    public func generateSealedKey(
        policy: Policy = .authValue, authValue: SecretBytes? = nil, dictionaryAttackProtected: Bool? = nil
    ) throws
        -> (key: SecretBytes, sealed: SealedObject)
    {
        try withEngine { engine in
            let parent = try engine.storageKey(algorithm: nil, pinnedName: nil)
            return try engine.withHMACSession(saltedWith: parent) { session, _ in
                let tpmRandom = try engine.randomBytes(32, session: session)
                let osRandom = try SecretBytes.random(count: 32)
                let key = Self.combine(osRandom, tpmRandom)
                let sealed = try engine.seal(
                    key, under: parent, policy: policy, authValue: authValue,
                    dictionaryAttackProtected: dictionaryAttackProtected, session: session)
                return (key, sealed)
            }
        }
    }

    /// Seals `secret` (1 to 128 bytes) to this TPM under `policy`.
    ///
    /// - Parameter dictionaryAttackProtected: as for ``generateSealedKey(policy:authValue:dictionaryAttackProtected:)``.
    /// - Throws: ``TPMError`` `.invalidArgument` for sizes out of range or a PIN without
    ///   PolicyAuthValue in `policy`.
    public func seal(
        _ secret: SecretBytes, policy: Policy = .authValue, authValue: SecretBytes? = nil,
        dictionaryAttackProtected: Bool? = nil
    ) throws -> SealedObject {
        try withEngine { engine in
            let parent = try engine.storageKey(algorithm: nil, pinnedName: nil)
            return try engine.withHMACSession(saltedWith: parent) { session, _ in
                try engine.seal(
                    secret, under: parent, policy: policy, authValue: authValue,
                    dictionaryAttackProtected: dictionaryAttackProtected, session: session)
            }
        }
    }

    /// Unseals `sealed`, satisfying `policy` in a salted policy session.
    ///
    /// - Throws: ``TPMError`` `.wrongStorageKey` (another TPM), `.policyCheckFailed` (a PCR or NV
    ///   condition no longer holds, or `policy` is not the one sealed with), `.authorizationFailed`
    ///   (wrong PIN), `.lockout`, `.malformedData`.
    ///
    /// - Parameter nvAuthorizations: the authorization values of NV indices the policy reads
    ///   (PolicyNV), by handle; an index not listed is read with an empty one.
    public func unseal(
        _ sealed: SealedObject, policy: Policy = .authValue, authValue: SecretBytes? = nil,
        nvAuthorizations: [UInt32: SecretBytes] = [:]
    ) throws -> SecretBytes {
        try use(sealed, policy: policy, authValue: authValue, nvAuthorizations: nvAuthorizations) {
            engine, object, session, keep in
            try engine.unseal(object, session: session, keepingSession: keep)
        }
    }

    /// Loads `object` and runs its one command in a session that satisfies its policy, with
    /// `authValue` handed to ESAPI for the object and cleared afterwards.
    func use<R: Sendable>(
        _ object: some StoredTPMObject, policy: Policy, authValue: SecretBytes?,
        nvAuthorizations: [UInt32: SecretBytes], _ command: (Engine, ESYS_TR, ESYS_TR, Bool) throws -> R
    ) throws -> R {
        guard policy.digest == object.authPolicy else {
            throw TPMError(
                .policyCheckFailed,
                "The policy given (\(policy.digest)) is not the one the object was made with (\(object.authPolicy))")
        }
        return try withEngine { engine in
            try engine.withAuthorizedObject(
                publicArea: object.publicArea, privateArea: object.privateArea,
                storageKeyAlgorithm: object.storageKeyAlgorithm, storageKeyName: object.storageKeyName,
                authValueAlone: object.acceptsAuthValueAlone, policy: policy, nvAuthorizations: nvAuthorizations
            ) { handle, session, keep in
                try engine.setAuthValue(authValue, of: handle)
                defer { try? engine.setAuthValue(nil, of: handle) }
                return try command(engine, handle, session, keep)
            }
        }
    }

    /// `count` (1 to 32) random bytes from the TPM, encrypted on the bus.
    ///
    /// - Throws: ``TPMError``.
    public func randomBytes(count: Int) throws -> SecretBytes {
        try withEngine { engine in
            let parent = try engine.storageKey(algorithm: nil, pinnedName: nil)
            return try engine.withHMACSession(saltedWith: parent) { session, _ in
                try engine.randomBytes(count, session: session)
            }
        }
    }

    /// The digest the TPM itself computes for `policy`, in a trial session: the cross-check for
    /// ``Policy/digest``.
    ///
    /// - Throws: ``TPMError``; NV indices the policy names must exist.
    public func trialPolicyDigest(_ policy: Policy) throws -> PolicyDigest {
        try withEngine { engine in
            try engine.withSession(.trial, saltedWith: nil) { session, _ in
                try engine.run(policy, in: session, trial: true)
                return try engine.policyDigest(of: session)
            }
        }
    }

    // MARK: - PCRs

    /// The current SHA-256 values of the selected PCRs, ascending.
    ///
    /// - Throws: ``TPMError``.
    public func readPCRs(_ selection: PCRSelection) throws -> [[UInt8]] {
        try withEngine { engine in try engine.readPCRs(selection) }
    }

    /// Extends a SHA-256 PCR with a 32-byte digest.
    ///
    /// - Throws: ``TPMError``.
    public func extendPCR(_ index: Int, with digest: [UInt8]) throws {
        try withEngine { engine in try engine.extendPCR(index, with: digest) }
    }

    /// A PolicyPCR assertion that the selected PCRs keep their current values.
    ///
    /// - Throws: ``TPMError``.
    public func currentPCRAssertion(_ selection: PCRSelection) throws -> PolicyAssertion {
        .pcrs(selection, expectedDigest: PCRSelection.digest(ofValues: try readPCRs(selection)))
    }

    // MARK: - Test support

    /// The decrypted response parameters ESAPI still holds (tests check that secrets are scrubbed).
    func responseBufferContents() throws -> [UInt8] {
        try withEngine { $0.responseBufferContents() }
    }

    /// HKDF-SHA256 over both sources (OS randomness as the key material, TPM randomness as the
    /// salt): the result is as strong as the stronger one. The intermediate keys are swift-crypto
    /// `SymmetricKey`s, which zeroize their storage when released.
    private static func combine(_ osRandom: SecretBytes, _ tpmRandom: SecretBytes) -> SecretBytes {
        let material = osRandom.withUnsafeBytes { SymmetricKey(data: $0) }
        let salt = tpmRandom.withUnsafeBytes { SymmetricKey(data: $0) }
        let key = salt.withUnsafeBytes { saltBytes in
            HKDF<SHA256>.deriveKey(
                inputKeyMaterial: material, salt: saltBytes,
                info: Array("TPMKeychain sealed key v1".utf8), outputByteCount: 32)
        }
        return key.withUnsafeBytes { SecretBytes(copying: $0) }
    }
}

/// What ``TPMConnection/describe()`` reports.
public struct TPMDescription: Sendable, Hashable {
    public let tcti: String
    /// The TPM_PT_MANUFACTURER code, e.g. "IBM" for swtpm, "INTC", "IFX", "STM".
    public let manufacturer: String
    public let vendor: String
    public let firmwareVersion: String
    /// True for swtpm or the Microsoft simulator, however it is reached (a simulator's TCTI, or a
    /// device node or resource manager in front of one, as systemd's `systemd-tpm2-swtpm` puts
    /// swtpm behind /dev/tpmrm0): nothing is bound to hardware.
    public let isSimulator: Bool

    /// Whether a TPM's vendor strings (TPM_PT_VENDOR_STRING_1 to _4, joined, each trimmed) are a
    /// software TPM's: libtpms, which swtpm runs, and IBM's simulator report "SW   TPM". Firmware
    /// and discrete TPMs report their product ("SLB9670", "fTPM", ...).
    public static func reportsSoftware(vendor: String) -> Bool {
        vendor.filter { $0 != " " }.uppercased() == "SWTPM"
    }
}

extension Engine {
    /// TPM2_Create of a sealed object holding `secret` under `parent`, in the salted `session`.
    func seal(
        _ secret: SecretBytes, under parent: StorageRootKey, policy: Policy, authValue: SecretBytes?,
        dictionaryAttackProtected: Bool? = nil, session: ESYS_TR
    ) throws -> SealedObject {
        if let authValue, authValue.count > 0, !policy.usesAuthValue {
            throw TPMError(.invalidArgument, "A PIN only protects an object whose policy includes PolicyAuthValue")
        }
        let template = PublicTemplate.sealedData(
            policy: policy.digest, dictionaryAttackProtected: dictionaryAttackProtected ?? ((authValue?.count ?? 0) > 0)
        )
        let (publicArea, privateArea) = try create(
            under: parent, template: template, data: secret,
            authValue: authValue, session: session)
        return try SealedObject(
            publicArea: publicArea, privateArea: privateArea,
            storageKeyAlgorithm: parent.algorithm, storageKeyName: parent.name)
    }
}

extension String {
    fileprivate var trimmingSpaces: String {
        var text = Substring(self)
        while text.last == " " { text = text.dropLast() }
        while text.first == " " { text = text.dropFirst() }
        return String(text)
    }
}
