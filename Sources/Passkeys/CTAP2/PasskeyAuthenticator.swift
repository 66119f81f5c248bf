import Crypto
import FoundationEssentials
import Secrets
import SystemCalls
package import TPMKeychain
import WireFormat

/// A CTAP 2.1 authenticator over the keychain's passkeys (CTAP 2.1 §6): each credential's key is
/// made by the TPM and never leaves it, the PIN is checked by the TPM, and every credential is
/// read and written through the service for the request's caller. One command runs at a time, as
/// on a device; the state a device keeps in RAM (the key-agreement key, the pinUvAuthToken, the
/// PIN mismatches since power-up, a getNextAssertion's queue) lives here, for the process.
package final class PasskeyAuthenticator: Sendable {
    /// Who asks, for the decision point and for the person.
    package struct Requester: Sendable {
        package let caller: AccessCaller
        /// The program, its pid and chain, as the person is told.
        package let description: String

        package init(caller: AccessCaller, description: String) {
            self.caller = caller
            self.description = description
        }
    }

    package struct Configuration: Sendable {
        package let location: KeychainLocation
        /// Asks the person to confirm their presence (the question names the relying party and
        /// the program asking); true for yes. Runs on the connection's thread.
        package let presence: @Sendable (String) -> Bool
        /// The authenticator model's AAGUID: all zero, as attestation "none" goes with.
        package var aaguid = [UInt8](repeating: 0, count: 16)
        /// Built-in user verification (a fingerprint through fprintd); nil: the PIN only. A
        /// credential made with it is bound to the enrolled fingers (biometryCurrentSet).
        package var fingerprints: (any Authenticator)?
        /// Built-in user verification by the device passcode, which the TPM checks (its
        /// dictionary-attack lockout counts wrong ones), where no fingerprint reader is given.
        package var passcode: PasscodeSource?

        /// Whether the authenticator verifies the user itself (CTAP's `uv` option).
        var verifiesUsers: Bool { fingerprints != nil || passcode != nil }
        /// Where refusals are told, with their reason (never a secret).
        package var log: (@Sendable (String) -> Void)?

        package init(location: KeychainLocation, presence: @escaping @Sendable (String) -> Bool) {
            self.location = location
            self.presence = presence
        }
    }

    /// The RAM of the device.
    private struct State {
        var keyAgreement = P256.KeyAgreement.PrivateKey()
        var token = SymmetricKey(size: .bits256)
        var tokenPermissions: UInt8 = 0
        var tokenRelyingParty: String?
        /// Whether the token came from a finger (built-in UV), not the PIN.
        var tokenByBiometry = false
        var mismatches = 0
        var nextAssertions: NextAssertions?
        var relyingPartiesLeft: [String] = []
        var credentialsLeft: [PasskeyCredential] = []

        /// Keeps only the large-blob-write permission of a token that was used with presence.
        mutating func spendToken() {
            tokenPermissions &= 0x10
        }

        mutating func newToken() {
            token = SymmetricKey(size: .bits256)
            tokenPermissions = 0
            tokenRelyingParty = nil
            tokenByBiometry = false
        }
    }

    private struct NextAssertions {
        var credentials: [PasskeyCredential]
        let relyingParty: String
        let clientDataHash: [UInt8]
        let flags: UInt8
        let verified: Bool
        let salts: HMACSecretSalts?
        let expires: ContinuousClock.Instant
    }

    package static let commandLimit = CTAPHIDChannels.maximumMessage
    static let maximumCredentialsInList = 16
    static let maximumCredentialIDLength = 64
    static let minimumPINLength = 4
    static let discoverableCapacity = 1000
    /// CTAP 2.1's tries before the PIN blocks (the store keeps the count).
    static let pinTries: UInt32 = 8

    private let configuration: Configuration
    private let state = Locked(State())
    private let counts = SignCounts()
    /// One command at a time, as on a device.
    private let running = Locked(())

    package init(_ configuration: Configuration) {
        self.configuration = configuration
    }

    /// The response to a CTAPHID_CBOR message: a status byte, then the CBOR response.
    package func respond(to message: [UInt8], from requester: Requester) -> [UInt8] {
        running.withLock { _ in
            guard let command = message.first else { return [CTAP2Status.invalidLength("no command byte").code] }
            do throws(CTAP2Status) {
                let parameters: CBOR? = message.count > 1 ? try Self.parse(message.dropFirst()) : nil
                guard let response = try run(command, parameters, requester) else { return [0] }
                return [0] + response.encoded()
            } catch {
                configuration.log?(
                    "refused command 0x\(String(command, radix: 16)) of \(requester.description): \(error)")
                return [error.code]
            }
        }
    }

    private static func parse(_ bytes: ArraySlice<UInt8>) throws(CTAP2Status) -> CBOR {
        do {
            let value = try CBOR(decoding: bytes)
            guard value.mapValue != nil else { throw CTAP2Status.invalidCBOR("the parameters are not a map") }
            return value
        } catch let status as CTAP2Status {
            throw status
        } catch {
            throw .invalidCBOR("\(error)")
        }
    }

    private func run(_ command: UInt8, _ parameters: CBOR?, _ requester: Requester) throws(CTAP2Status) -> CBOR? {
        switch command {
        case 0x04: return try info(requester)
        case 0x01: return try makeCredential(try required(parameters), requester)
        case 0x02: return try getAssertion(try required(parameters), requester)
        case 0x08: return try getNextAssertion(requester)
        case 0x06: return try clientPIN(try required(parameters), requester)
        case 0x07: return try reset(requester)
        case 0x0A, 0x41: return try credentialManagement(try required(parameters), requester)
        case 0x0B:
            try askPresence("Confirm you are using the passkey authenticator, for \(requester.description)")
            return nil
        default: throw .invalidCommand("command 0x\(String(command, radix: 16)) is not CTAP 2.1's")
        }
    }

    private func required(_ parameters: CBOR?) throws(CTAP2Status) -> CBOR {
        guard let parameters else { throw .missingParameter("the command takes parameters") }
        return parameters
    }

    private func credentials(_ requester: Requester) -> PasskeyCredentials {
        PasskeyCredentials(location: configuration.location, caller: requester.caller)
    }

    private func service(_ requester: Requester) throws(KeychainError) -> ItemService {
        try ItemService(location: configuration.location, caller: requester.caller)
    }

    /// Runs a keychain operation, its errors in CTAP's words.
    private func keychain<R>(_ body: () throws(KeychainError) -> R) throws(CTAP2Status) -> R {
        do {
            return try body()
        } catch {
            switch error.code {
            case .itemInvalidated: throw .noCredentials(error.message)
            case .permissionDenied, .interactionNotAllowed, .missingEntitlement: throw .operationDenied(error.message)
            case .passcodeNotSet: throw .pinNotSet(error.message)
            case .invalidParameter: throw .invalidParameter(error.message)
            case .authenticationFailed: throw CTAP2Status(0x3F, error.message)
            case .userCanceled: throw .operationDenied(error.message)
            // The TPM's dictionary-attack lockout: it lifts with time, as a power cycle's block does.
            case .lockout: throw .pinAuthBlocked(error.message)
            default: throw .other(error.message)
            }
        }
    }

    private func askPresence(_ question: String) throws(CTAP2Status) {
        guard configuration.presence(question) else { throw .operationDenied("the person did not confirm") }
    }

    // MARK: authenticatorGetInfo

    private func info(_ requester: Requester) throws(CTAP2Status) -> CBOR {
        let pinSet = try keychain { () throws(KeychainError) in
            try ItemService(location: configuration.location, caller: requester.caller).authenticatorPINTries() != nil
        }
        let discoverable = try keychain { () throws(KeychainError) in
            try credentials(requester).all().filter(\.discoverable).count
        }
        return .map([
            .int(1): .array([.text("FIDO_2_0"), .text("FIDO_2_1")]),
            .int(2): .array([.text("credProtect"), .text("hmac-secret")]),
            .int(3): .bytes(configuration.aaguid),
            .int(4): .map(
                [
                    .text("rk"): .bool(true), .text("up"): .bool(true), .text("clientPin"): .bool(pinSet),
                    .text("credMgmt"): .bool(true), .text("pinUvAuthToken"): .bool(true),
                    .text("makeCredUvNotRqd"): .bool(true),
                ].merging(configuration.verifiesUsers ? [.text("uv"): .bool(true)] : [:]) { $1 }),
            .int(5): .int(Int64(Self.commandLimit)),
            .int(6): .array([.int(PinUvAuthProtocolTwo.number)]),
            .int(7): .int(Int64(Self.maximumCredentialsInList)),
            .int(8): .int(Int64(Self.maximumCredentialIDLength)),
            .int(9): .array([.text("usb")]),
            .int(0x0A): .array([.map([.text("alg"): .int(-7), .text("type"): .text("public-key")])]),
            .int(0x0D): .int(Int64(Self.minimumPINLength)),
            .int(0x14): .int(Int64(max(0, Self.discoverableCapacity - discoverable))),
        ])
    }

    // MARK: authenticatorMakeCredential

    private func makeCredential(_ request: CBOR, _ requester: Requester) throws(CTAP2Status) -> CBOR {
        guard let clientDataHash = request[1]?.bytesValue, let relyingParty = request[2], let user = request[3],
            let algorithms = request[4]?.arrayValue
        else { throw .missingParameter("makeCredential needs clientDataHash, rp, user and pubKeyCredParams") }
        guard clientDataHash.count == 32, let rpID = relyingParty["id"]?.textValue, !rpID.isEmpty,
            let userID = user["id"]?.bytesValue, (1...64).contains(userID.count)
        else { throw .invalidParameter("clientDataHash, rp.id or user.id is malformed") }
        for algorithm in algorithms {
            guard algorithm["type"]?.textValue != nil, algorithm["alg"]?.int != nil else {
                throw .invalidParameter("a pubKeyCredParams entry has no type or alg")
            }
        }
        guard algorithms.contains(where: { $0["type"]?.textValue == "public-key" && $0["alg"]?.int == -7 }) else {
            throw .unsupportedAlgorithm("only ES256 (-7) keys are made")
        }
        let options = request[7]
        let residentKey = options?["rk"]?.boolValue ?? false
        if options?["up"]?.boolValue == false { throw .invalidOption("a credential is made with the person present") }
        let wantsVerification = options?["uv"]?.boolValue == true
        if wantsVerification, !configuration.verifiesUsers {
            throw .invalidOption("built-in user verification is not offered: use the PIN")
        }
        var verified = try checkToken(
            request[8], protocol: request[9], message: clientDataHash, permission: 0x01, relyingParty: rpID, requester)
        let usedToken = verified
        var biometric = verified && state.withLock { $0.tokenByBiometry }
        if wantsVerification, !verified {
            biometric = try verifyUser("create a passkey for \(DisplayText.quoted(rpID, limit: 100))")
            verified = true
        }
        if !verified, try pinIsSet(requester), residentKey {
            throw .pinRequired("a discoverable credential needs the PIN once one is set")
        }
        let protection = try credentialProtection(request[6])
        let hmacSecret = request[6]?["hmac-secret"]?.boolValue == true
        if let excluded = request[5]?.arrayValue {
            for entry in excluded {
                guard let id = entry["id"]?.bytesValue else {
                    throw .invalidParameter("an excludeList entry has no id")
                }
                let found = try keychain { () throws(KeychainError) in
                    try credentials(requester).credential(id, of: rpID)
                }
                if let found, found.protection < 3 || verified {
                    try askPresence("A passkey for \(rpID) exists already; confirm to tell \(requester.description)")
                    throw .credentialExcluded("the relying party has a credential here already")
                }
            }
        }
        let userName = user["name"]?.textValue
        try askPresence(
            "Create a passkey for \(DisplayText.quoted(rpID, limit: 100))"
                + (userName.map { " as " + DisplayText.quoted($0, limit: 64) } ?? "") + ", for \(requester.description)"
        )
        // A credential the person's finger verified is bound to the fingers enrolled now.
        let enrollment = biometric ? try enrolledFingers() : nil
        let made = try keychain { () throws(KeychainError) in
            try credentials(requester).create(
                relyingParty: rpID, userID: userID, userName: userName,
                displayName: user["displayName"]?.textValue, discoverable: residentKey, protection: protection ?? 1,
                hmacSecret: hmacSecret, boundTo: enrollment)
        }
        var flags: UInt8 = 0x01 | 0x40
        if verified { flags |= 0x04 }
        var extensions: [CBOR: CBOR] = [:]
        if let protection { extensions[.text("credProtect")] = .int(Int64(protection)) }
        if hmacSecret { extensions[.text("hmac-secret")] = .bool(true) }
        if !extensions.isEmpty { flags |= 0x80 }
        var authenticatorData = Array(SHA256.hash(data: Array(rpID.utf8))) + [flags, 0, 0, 0, 0]
        authenticatorData += configuration.aaguid
        authenticatorData += [UInt8(made.id.count >> 8), UInt8(made.id.count & 0xFF)] + made.id
        authenticatorData += Self.coseKey(made.publicKey).encoded()
        if !extensions.isEmpty { authenticatorData += CBOR.map(extensions).encoded() }
        if usedToken { state.withLock { $0.spendToken() } }
        return .map([.int(1): .text("none"), .int(2): .bytes(authenticatorData), .int(3): .map([:])])
    }

    private func credentialProtection(_ extensions: CBOR?) throws(CTAP2Status) -> UInt8? {
        guard let extensions else { return nil }
        guard extensions.mapValue != nil else { throw .invalidParameter("extensions is not a map") }
        guard let level = extensions["credProtect"] else { return nil }
        guard let value = level.int, (1...3).contains(value) else {
            throw .invalidParameter("credProtect is 1, 2 or 3")
        }
        return UInt8(value)
    }

    /// The credential's public key as a COSE_Key (EC2, ES256, P-256).
    static func coseKey(_ publicKey: [UInt8]) -> CBOR {
        .map([
            .int(1): .int(2), .int(3): .int(-7), .int(-1): .int(1), .int(-2): .bytes(Array(publicKey[1..<33])),
            .int(-3): .bytes(Array(publicKey[33..<65])),
        ])
    }

    // MARK: authenticatorGetAssertion

    private func getAssertion(_ request: CBOR, _ requester: Requester) throws(CTAP2Status) -> CBOR {
        guard let rpID = request[1]?.textValue, let clientDataHash = request[2]?.bytesValue else {
            throw .missingParameter("getAssertion needs rpId and clientDataHash")
        }
        guard !rpID.isEmpty, clientDataHash.count == 32 else {
            throw .invalidParameter("rpId or clientDataHash is malformed")
        }
        let options = request[5]
        if options?["rk"] != nil { throw .unsupportedOption("rk is not an assertion's option") }
        let wantsVerification = options?["uv"]?.boolValue == true
        if wantsVerification, !configuration.verifiesUsers {
            throw .invalidOption("built-in user verification is not offered: use the PIN")
        }
        let presence = options?["up"]?.boolValue ?? true
        var verified = try checkToken(
            request[6], protocol: request[7], message: clientDataHash, permission: 0x02, relyingParty: rpID, requester)
        let usedToken = verified
        let allowed = request[3]?.arrayValue ?? []
        guard allowed.count <= Self.maximumCredentialsInList else {
            throw .limitExceeded("the allowList is longer than maxCredentialCountInList")
        }
        var found: [PasskeyCredential]
        if allowed.isEmpty {
            found = try keychain { () throws(KeychainError) in try credentials(requester).credentials(of: rpID) }.filter
            {
                $0.discoverable && ($0.protection == 1 || verified)
            }
        } else {
            found = []
            for entry in allowed {
                guard let id = entry["id"]?.bytesValue, entry["type"]?.textValue != nil else {
                    throw .invalidParameter("an allowList entry has no id or type")
                }
                if let credential = try keychain({ () throws(KeychainError) in
                    try credentials(requester).credential(id, of: rpID)
                }),
                    credential.protection < 3 || verified, !found.contains(where: { $0.id == id })
                {
                    found.append(credential)
                }
            }
        }
        guard let first = found.first else { throw .noCredentials("no credential of \(rpID) is here") }
        if presence {
            try askPresence(
                "Sign in to \(DisplayText.quoted(rpID, limit: 100)) with a passkey"
                    + (first.userName.map { " as " + DisplayText.quoted($0, limit: 64) } ?? "")
                    + ", for \(requester.description)")
        }
        // A biometry-bound credential verifies the finger itself when it is opened.
        if wantsVerification, !verified, !first.isBoundToBiometry {
            _ = try verifyUser("sign in to \(DisplayText.quoted(rpID, limit: 100))")
            verified = true
        }
        var flags: UInt8 = presence ? 0x01 : 0
        if verified { flags |= 0x04 }
        let salts = try hmacSecretSalts(request[4])
        var response = try assertion(
            first, relyingParty: rpID, clientDataHash: clientDataHash, flags: flags, withUser: allowed.isEmpty,
            verified: verified, salts: salts, requester)
        // A token that brought the person's presence is spent with it (CTAP 2.1 §6.5.5.7); a
        // silent check (up false), as clients make before the real request, leaves it.
        state.withLock {
            $0.nextAssertions = nil
            if usedToken, presence { $0.spendToken() }
        }
        if allowed.isEmpty, found.count > 1 {
            response[.int(5)] = .int(Int64(found.count))
            let next = NextAssertions(
                credentials: Array(found.dropFirst()), relyingParty: rpID, clientDataHash: clientDataHash, flags: flags,
                verified: verified, salts: salts, expires: .now + .seconds(30))
            state.withLock { $0.nextAssertions = next }
        }
        return .map(response)
    }

    private func getNextAssertion(_ requester: Requester) throws(CTAP2Status) -> CBOR {
        let next = state.withLock { state -> (PasskeyCredential, NextAssertions)? in
            guard var pending = state.nextAssertions, ContinuousClock.now < pending.expires,
                !pending.credentials.isEmpty
            else {
                state.nextAssertions = nil
                return nil
            }
            let credential = pending.credentials.removeFirst()
            state.nextAssertions = pending.credentials.isEmpty ? nil : pending
            return (credential, pending)
        }
        guard let (credential, pending) = next else { throw .notAllowed("no getAssertion to continue") }
        return .map(
            try assertion(
                credential, relyingParty: pending.relyingParty, clientDataHash: pending.clientDataHash,
                flags: pending.flags, withUser: true, verified: pending.verified, salts: pending.salts, requester))
    }

    private func assertion(
        _ credential: PasskeyCredential, relyingParty: String, clientDataHash: [UInt8], flags: UInt8, withUser: Bool,
        verified: Bool, salts: HMACSecretSalts?, _ requester: Requester
    ) throws(CTAP2Status) -> [CBOR: CBOR] {
        let rpIDHash = Array(SHA256.hash(data: Array(relyingParty.utf8)))
        var flags = flags
        var verified = verified
        var opened: ItemService.OpenedKey?
        if credential.isBoundToBiometry {
            opened = try openWithFinger(credential, relyingParty: relyingParty, requester)
            verified = true
            flags |= 0x04
        }
        var extensions: [UInt8] = []
        if let salts, let output = try hmacSecretOutput(credential, salts: salts, verified: verified) {
            flags |= 0x80
            extensions = CBOR.map([.text("hmac-secret"): .bytes(output)]).encoded()
        }
        let signed = try keychain { () throws(KeychainError) in
            try credentials(requester).sign(credential, counts: counts, key: opened) { count in
                rpIDHash + [
                    flags, UInt8(count >> 24), UInt8((count >> 16) & 0xFF), UInt8((count >> 8) & 0xFF),
                    UInt8(count & 0xFF),
                ]
                    + extensions + clientDataHash
            }
        }
        let count = signed.count
        let authenticatorData =
            rpIDHash + [
                flags, UInt8(count >> 24), UInt8((count >> 16) & 0xFF), UInt8((count >> 8) & 0xFF), UInt8(count & 0xFF),
            ] + extensions
        var response: [CBOR: CBOR] = [
            .int(1): .map([.text("id"): .bytes(credential.id), .text("type"): .text("public-key")]),
            .int(2): .bytes(authenticatorData), .int(3): .bytes(signed.signature),
        ]
        if withUser { response[.int(4)] = userEntity(credential, verified: verified) }
        return response
    }

    /// hmac-secret's input to an assertion (CTAP 2.1 §12.5), checked: the platform's key, and its
    /// one or two 32-byte salts, decrypted with the shared secret they were sent under.
    struct HMACSecretSalts {
        let shared: SymmetricKey
        let salts: [UInt8]
    }

    private func hmacSecretSalts(_ extensions: CBOR?) throws(CTAP2Status) -> HMACSecretSalts? {
        guard let input = extensions?["hmac-secret"] else { return nil }
        guard let platform = input[1], let encrypted = input[2]?.bytesValue, let authentication = input[3]?.bytesValue
        else { throw .missingParameter("hmac-secret needs keyAgreement, saltEnc and saltAuth") }
        if let number = input[4], number.int != PinUvAuthProtocolTwo.number {
            throw .invalidParameter("hmac-secret: only PIN/UV auth protocol 2")
        }
        let shared = try sharedSecret(platform)
        guard PinUvAuthProtocolTwo.verify(authentication, of: encrypted, with: shared) else {
            throw .pinAuthInvalid("hmac-secret's saltAuth does not verify")
        }
        let salts = try PinUvAuthProtocolTwo.decrypt(encrypted, with: shared)
        guard salts.count == 32 || salts.count == 64 else {
            throw .invalidLength("hmac-secret takes one or two 32-byte salts")
        }
        return HMACSecretSalts(shared: shared, salts: salts)
    }

    /// HMAC-SHA-256(CredRandom, salt) for each salt, encrypted for the platform; nil for a
    /// credential made without hmac-secret. The CredRandom of an assertion with user
    /// verification is not the one without, so the two never give the same output.
    private func hmacSecretOutput(
        _ credential: PasskeyCredential, salts: HMACSecretSalts, verified: Bool
    ) throws(CTAP2Status) -> [UInt8]? {
        guard let randoms = credential.hmacSecret else { return nil }
        let key = SymmetricKey(data: verified ? randoms.prefix(32) : randoms.suffix(32))
        var output: [UInt8] = []
        defer { output.withUnsafeMutableBytes { secureZero($0) } }
        for start in stride(from: 0, to: salts.salts.count, by: 32) {
            output += Array(HMAC<SHA256>.authenticationCode(for: salts.salts[start..<start + 32], using: key))
        }
        return try PinUvAuthProtocolTwo.encrypt(output, with: salts.shared)
    }

    /// The user entity: its ID always; its names only after user verification (CTAP 2.1 §6.2.2).
    private func userEntity(_ credential: PasskeyCredential, verified: Bool) -> CBOR {
        var user: [CBOR: CBOR] = [.text("id"): .bytes(credential.userID)]
        if verified {
            if let name = credential.userName { user[.text("name")] = .text(name) }
            if let name = credential.displayName { user[.text("displayName")] = .text(name) }
        }
        return .map(user)
    }

    // MARK: pinUvAuthToken

    private func pinIsSet(_ requester: Requester) throws(CTAP2Status) -> Bool {
        try keychain { () throws(KeychainError) in try service(requester).authenticatorPINTries() } != nil
    }

    /// Checks a request's pinUvAuthParam against the current token; true when one was given and
    /// is valid for `permission` and `relyingParty` (binding the token to it).
    private func checkToken(
        _ parameter: CBOR?, protocol number: CBOR?, message: [UInt8], permission: UInt8, relyingParty: String?,
        _ requester: Requester
    ) throws(CTAP2Status) -> Bool {
        guard let parameter else { return false }
        guard let signature = parameter.bytesValue else { throw .invalidParameter("pinUvAuthParam is not bytes") }
        if signature.isEmpty {
            // A zero-length parameter asks which authenticator the person touches (§6.1.2 step 1).
            try askPresence("Choose this passkey authenticator, for \(requester.description)")
            throw try pinIsSet(requester) ? .pinInvalid("touched") : .pinNotSet("touched")
        }
        guard let number else { throw .missingParameter("pinUvAuthProtocol is missing") }
        guard number.int == PinUvAuthProtocolTwo.number else { throw .invalidParameter("only PIN/UV protocol 2") }
        try state.withLock { (state) throws(CTAP2Status) in
            guard PinUvAuthProtocolTwo.verify(signature, of: message, with: state.token),
                state.tokenPermissions & permission != 0
            else { throw .pinAuthInvalid("pinUvAuthParam does not verify for this permission") }
            if let relyingParty {
                if let bound = state.tokenRelyingParty, bound != relyingParty {
                    throw .pinAuthInvalid("the token is for another relying party")
                }
                state.tokenRelyingParty = relyingParty
            }
        }
        return true
    }

    // MARK: authenticatorClientPIN

    private func clientPIN(_ request: CBOR, _ requester: Requester) throws(CTAP2Status) -> CBOR? {
        guard let subcommand = request[2]?.int else { throw .missingParameter("clientPIN needs a subCommand") }
        // The two retry counts take no protocol (CTAP 2.1 §6.5.5.2); CTAP 2.0 platforms, libfido2
        // among them, still send protocol 1 with them, which is not theirs to refuse.
        if subcommand != 0x01, subcommand != 0x07, subcommand != 2 || request[1] != nil {
            guard request[1]?.int == PinUvAuthProtocolTwo.number else {
                throw .invalidParameter("only PIN/UV auth protocol 2")
            }
        }
        switch subcommand {
        case 0x01:
            let tries = try keychain { () throws(KeychainError) in try service(requester).authenticatorPINTries() }
            return .map([.int(3): .int(Int64(tries ?? Self.pinTries)), .int(4): .bool(false)])
        case 0x02:
            return .map([.int(1): state.withLock { PinUvAuthProtocolTwo.coseKey($0.keyAgreement) }])
        case 0x03:
            guard let platform = request[3], let newPIN = request[5]?.bytesValue, let signature = request[4]?.bytesValue
            else {
                throw .missingParameter("setPIN needs keyAgreement, newPinEnc and pinUvAuthParam")
            }
            guard try !pinIsSet(requester) else { throw .pinAuthInvalid("a PIN is set already: change it") }
            let shared = try sharedSecret(platform)
            guard PinUvAuthProtocolTwo.verify(signature, of: newPIN, with: shared) else {
                throw .pinAuthInvalid("pinUvAuthParam does not verify")
            }
            var padded = try PinUvAuthProtocolTwo.decrypt(newPIN, with: shared)
            defer { padded.withUnsafeMutableBytes { secureZero($0) } }
            let hash = try Self.pinHash(padded)
            try keychain { () throws(KeychainError) in try service(requester).setAuthenticatorPIN(hash) }
            return nil
        case 0x04:
            guard let platform = request[3], let newPIN = request[5]?.bytesValue,
                let oldHash = request[6]?.bytesValue, let signature = request[4]?.bytesValue
            else { throw .missingParameter("changePIN needs keyAgreement, pinHashEnc, newPinEnc and pinUvAuthParam") }
            let shared = try sharedSecret(platform)
            guard PinUvAuthProtocolTwo.verify(signature, of: newPIN + oldHash, with: shared) else {
                throw .pinAuthInvalid("pinUvAuthParam does not verify")
            }
            try checkPIN(oldHash, shared: shared, requester)
            var padded = try PinUvAuthProtocolTwo.decrypt(newPIN, with: shared)
            defer { padded.withUnsafeMutableBytes { secureZero($0) } }
            let hash = try Self.pinHash(padded)
            try keychain { () throws(KeychainError) in try service(requester).setAuthenticatorPIN(hash) }
            state.withLock { $0.newToken() }
            return nil
        case 0x06:
            guard configuration.verifiesUsers else {
                throw .invalidSubcommand("built-in user verification is not offered: use the PIN")
            }
            guard let platform = request[3] else { throw .missingParameter("a token needs keyAgreement") }
            let (permissions, relyingParty) = try tokenPermissions(request)
            let shared = try sharedSecret(platform)
            let biometric = try verifyUser(
                "use passkeys" + (relyingParty.map { " of " + DisplayText.quoted($0, limit: 100) } ?? ""))
            var token = state.withLock { state -> [UInt8] in
                state.newToken()
                state.tokenPermissions = permissions
                state.tokenRelyingParty = relyingParty
                state.tokenByBiometry = biometric
                return state.token.withUnsafeBytes { Array($0) }
            }
            defer { token.withUnsafeMutableBytes { secureZero($0) } }
            return .map([.int(2): .bytes(try PinUvAuthProtocolTwo.encrypt(token, with: shared))])
        case 0x07:
            guard configuration.verifiesUsers else {
                throw .invalidSubcommand("built-in user verification is not offered: use the PIN")
            }
            // fprintd and the TPM keep their own counts of failures; CTAP's is not kept here.
            return .map([.int(5): .int(3)])
        case 0x05, 0x09:
            guard let platform = request[3], let pinHash = request[6]?.bytesValue else {
                throw .missingParameter("a token needs keyAgreement and pinHashEnc")
            }
            var permissions: UInt8 = 0x01 | 0x02
            var relyingParty: String?
            if subcommand == 0x09 { (permissions, relyingParty) = try tokenPermissions(request) }
            let shared = try sharedSecret(platform)
            try checkPIN(pinHash, shared: shared, requester)
            var token = state.withLock { state -> [UInt8] in
                state.newToken()
                state.tokenPermissions = permissions
                state.tokenRelyingParty = relyingParty
                return state.token.withUnsafeBytes { Array($0) }
            }
            defer { token.withUnsafeMutableBytes { secureZero($0) } }
            return .map([.int(2): .bytes(try PinUvAuthProtocolTwo.encrypt(token, with: shared))])
        default:
            throw .invalidSubcommand("clientPIN subcommand \(subcommand) is not offered")
        }
    }

    /// A token request's permissions and RP ID (getPinUvAuthTokenUsing…WithPermissions).
    private func tokenPermissions(_ request: CBOR) throws(CTAP2Status) -> (UInt8, String?) {
        guard let given = request[9]?.int else { throw .missingParameter("permissions is missing") }
        guard (1...0xFF).contains(given) else { throw .invalidParameter("permissions is 1 to 255") }
        guard given & ~0x07 == 0 else {
            throw .unauthorizedPermission("only makeCredential, getAssertion and credential management")
        }
        let relyingParty = request[0x0A]?.textValue
        if given & 0x03 != 0, relyingParty == nil {
            throw .missingParameter("rpId is needed for makeCredential and getAssertion")
        }
        return (UInt8(given), relyingParty)
    }

    // MARK: Fingerprints

    /// Built-in user verification, to `purpose`: a matching finger where fingerprints are
    /// configured, else the device passcode, which the TPM checks.
    ///
    /// - Returns: whether a finger verified the user (a new credential is then bound to them).
    private func verifyUser(_ purpose: String) throws(CTAP2Status) -> Bool {
        let fingerprints = configuration.fingerprints
        let context = AuthenticationContext(
            authenticator: fingerprints, passcode: configuration.passcode, location: configuration.location)
        let reason = (fingerprints != nil ? "Verify your fingerprint to " : "Enter the device passcode to ") + purpose
        try keychain { () throws(KeychainError) in
            try SynchronousWait.run { () async throws(KeychainError) in
                do throws(AuthenticationError) {
                    try await context.evaluate(
                        fingerprints != nil ? .deviceOwnerAuthenticationWithBiometrics : .deviceOwnerAuthentication,
                        reason: reason)
                } catch {
                    throw KeychainError(error)
                }
            }
        }
        return fingerprints != nil
    }

    /// What the fingers enrolled now are, for a new credential to be bound to.
    private func enrolledFingers() throws(CTAP2Status) -> [UInt8] {
        let fingerprints = configuration.fingerprints
        let enrollment = try keychain { () throws(KeychainError) -> [UInt8]? in
            let control = try AccessControl(.whenUnlockedThisDeviceOnly, flags: .biometryCurrentSet)
            return try SynchronousWait.run { () async throws(KeychainError) -> [UInt8]? in
                try await ItemService.enrollment(binding: control, authenticator: fingerprints)
            }
        }
        guard let enrollment else { throw .operationDenied("no finger is enrolled") }
        return enrollment
    }

    /// Opens a biometry-bound credential's key: a matching finger, then the TPM's check that the
    /// enrolled fingers are still those it was made under.
    private func openWithFinger(
        _ credential: PasskeyCredential, relyingParty: String, _ requester: Requester
    ) throws(CTAP2Status) -> ItemService.OpenedKey? {
        guard let fingerprints = configuration.fingerprints else {
            throw .operationDenied("the passkey needs a fingerprint: start the authenticator with --fprintd")
        }
        let context = AuthenticationContext(authenticator: fingerprints, location: configuration.location)
        context.localizedReason =
            "Sign in to \(DisplayText.quoted(relyingParty, limit: 100)) with your fingerprint, for \(requester.description)"
        let store = credentials(requester)
        return try keychain { () throws(KeychainError) in
            try SynchronousWait.run { () async throws(KeychainError) -> ItemService.OpenedKey? in
                try await store.open(credential, context: context)
            }
        }
    }

    private func sharedSecret(_ platform: CBOR) throws(CTAP2Status) -> SymmetricKey {
        let agreement = state.withLock { $0.keyAgreement }
        return try PinUvAuthProtocolTwo.sharedSecret(agreement, platformKey: platform)
    }

    /// LEFT16(SHA-256(PIN)) of a decrypted newPinEnc: 64 bytes, the PIN then zeros; the PIN at
    /// least 4 code points and at most 63 bytes.
    private static func pinHash(_ padded: [UInt8]) throws(CTAP2Status) -> SecretBytes {
        guard padded.count == 64 else { throw .pinPolicyViolation("newPinEnc is not 64 bytes") }
        let pin = padded.prefix { $0 != 0 }
        // Counted without a String, which could not be erased.
        var codePoints = 0
        let malformed = transcode(pin.makeIterator(), from: UTF8.self, to: UTF32.self, stoppingOnError: true) { _ in
            codePoints += 1
        }
        guard pin.count <= 63, !malformed, codePoints >= minimumPINLength else {
            throw .pinPolicyViolation("a PIN has 4 to 63 bytes of UTF-8, at least 4 characters")
        }
        return SecretBytes(copying: Array(SHA256.hash(data: pin).prefix(16)))
    }

    /// Checks pinHashEnc with the TPM; a mismatch costs a try, a new key agreement, and after
    /// three in a row, every try until the authenticator restarts (CTAP's power cycle).
    private func checkPIN(_ pinHashEncrypted: [UInt8], shared: SymmetricKey, _ requester: Requester) throws(CTAP2Status)
    {
        guard state.withLock({ $0.mismatches }) < 3 else {
            throw .pinAuthBlocked("three wrong PINs in a row: restart the authenticator")
        }
        var decrypted = try PinUvAuthProtocolTwo.decrypt(pinHashEncrypted, with: shared)
        defer { decrypted.withUnsafeMutableBytes { secureZero($0) } }
        guard decrypted.count == 16 else { throw .pinAuthInvalid("pinHashEnc is not one block") }
        let left = try keychain { () throws(KeychainError) in
            try service(requester).checkAuthenticatorPIN(SecretBytes(copying: decrypted))
        }
        guard let left else {
            state.withLock { $0.mismatches = 0 }
            return
        }
        let mismatches = state.withLock { state -> Int in
            state.keyAgreement = P256.KeyAgreement.PrivateKey()
            state.mismatches += 1
            return state.mismatches
        }
        if left == 0 { throw .pinBlocked("no try is left: reset the authenticator") }
        if mismatches >= 3 { throw .pinAuthBlocked("three wrong PINs in a row: restart the authenticator") }
        throw .pinInvalid("wrong PIN, \(left) tries left")
    }

    // MARK: authenticatorReset

    private func reset(_ requester: Requester) throws(CTAP2Status) -> CBOR? {
        try askPresence(
            "Reset the passkey authenticator, deleting every passkey and the PIN, for \(requester.description)")
        try keychain { () throws(KeychainError) in
            let all = credentials(requester)
            for credential in try all.all() { try all.delete(credential) }
            try ItemService(location: configuration.location, caller: requester.caller).removeAuthenticatorPIN()
        }
        state.withLock { $0 = State() }
        counts.forget(nil)
        return nil
    }

    // MARK: authenticatorCredentialManagement

    private func credentialManagement(_ request: CBOR, _ requester: Requester) throws(CTAP2Status) -> CBOR? {
        guard let subcommand = request[1]?.int else {
            throw .missingParameter("credentialManagement needs a subCommand")
        }
        let parameters = request[2]
        if [1, 2, 4, 6, 7].contains(subcommand) {
            guard let signature = request[4]?.bytesValue, let number = request[3] else {
                throw .pinRequired("credential management needs a pinUvAuthToken")
            }
            guard number.int == PinUvAuthProtocolTwo.number else { throw .invalidParameter("only PIN/UV protocol 2") }
            let message = [UInt8(subcommand)] + (parameters?.encoded() ?? [])
            try state.withLock { (state) throws(CTAP2Status) in
                guard PinUvAuthProtocolTwo.verify(signature, of: message, with: state.token),
                    state.tokenPermissions & 0x04 != 0
                else { throw .pinAuthInvalid("pinUvAuthParam does not verify for credential management") }
            }
        }
        let store = credentials(requester)
        switch subcommand {
        case 1:
            let count = try keychain { () throws(KeychainError) in try store.all() }.filter(\.discoverable).count
            return .map([.int(1): .int(Int64(count)), .int(2): .int(Int64(max(0, Self.discoverableCapacity - count)))])
        case 2:
            var parties: [String] = []
            for credential in try keychain({ () throws(KeychainError) in try store.all() })
            where credential.discoverable {
                if !parties.contains(credential.relyingParty) { parties.append(credential.relyingParty) }
            }
            guard let first = parties.first else { throw .noCredentials("no discoverable credential") }
            state.withLock { $0.relyingPartiesLeft = Array(parties.dropFirst()) }
            return .map(Self.relyingPartyEntry(first).merging([.int(5): .int(Int64(parties.count))]) { $1 })
        case 3:
            let next = state.withLock { state -> String? in
                state.relyingPartiesLeft.isEmpty ? nil : state.relyingPartiesLeft.removeFirst()
            }
            guard let next else { throw .notAllowed("no relying party is left") }
            return .map(Self.relyingPartyEntry(next))
        case 4:
            guard let hash = parameters?[1]?.bytesValue else { throw .missingParameter("rpIDHash is missing") }
            let found = try keychain { () throws(KeychainError) in try store.all() }.filter {
                $0.discoverable && Array(SHA256.hash(data: Array($0.relyingParty.utf8))) == hash
            }
            guard let first = found.first else { throw .noCredentials("no credential of that relying party") }
            state.withLock { $0.credentialsLeft = Array(found.dropFirst()) }
            return .map(Self.credentialEntry(first).merging([.int(9): .int(Int64(found.count))]) { $1 })
        case 5:
            let next = state.withLock { state -> PasskeyCredential? in
                state.credentialsLeft.isEmpty ? nil : state.credentialsLeft.removeFirst()
            }
            guard let next else { throw .notAllowed("no credential is left") }
            return .map(Self.credentialEntry(next))
        case 6:
            guard let id = parameters?[2]?["id"]?.bytesValue else { throw .missingParameter("credentialId is missing") }
            try keychain { () throws(KeychainError) in
                guard let found = try store.all().first(where: { $0.id == id }) else {
                    throw KeychainError(.itemInvalidated, "no such credential")
                }
                try store.delete(found)
                counts.forget(found.id)
            }
            return nil
        case 7:
            guard let id = parameters?[2]?["id"]?.bytesValue, let user = parameters?[3] else {
                throw .missingParameter("credentialId and user are needed")
            }
            try keychain { () throws(KeychainError) in
                guard let found = try store.all().first(where: { $0.id == id }) else {
                    throw KeychainError(.itemInvalidated, "no such credential")
                }
                guard user["id"]?.bytesValue == found.userID else {
                    throw KeychainError(.invalidParameter, "the user's ID is not the credential's")
                }
                try store.updateUser(
                    of: found, name: user["name"]?.textValue, displayName: user["displayName"]?.textValue)
            }
            return nil
        default:
            throw .invalidSubcommand("credentialManagement subcommand \(subcommand) is not offered")
        }
    }

    private static func relyingPartyEntry(_ relyingParty: String) -> [CBOR: CBOR] {
        [
            .int(3): .map([.text("id"): .text(relyingParty)]),
            .int(4): .bytes(Array(SHA256.hash(data: Array(relyingParty.utf8)))),
        ]
    }

    private static func credentialEntry(_ credential: PasskeyCredential) -> [CBOR: CBOR] {
        var user: [CBOR: CBOR] = [.text("id"): .bytes(credential.userID)]
        if let name = credential.userName { user[.text("name")] = .text(name) }
        if let name = credential.displayName { user[.text("displayName")] = .text(name) }
        return [
            .int(6): .map(user),
            .int(7): .map([.text("id"): .bytes(credential.id), .text("type"): .text("public-key")]),
            .int(8): coseKey(credential.publicKey),
            .int(0x0A): .int(Int64(credential.protection)),
        ]
    }
}
