import Crypto
import FoundationEssentials
package import SystemCalls
package import TPMKeychain
import WireFormat

#if canImport(Glibc)
import Glibc
#endif

/// The agent on its Unix socket: every connection answered on a thread of its own, one message at
/// a time, as OpenSSH's agent answers them. Only the socket's owner is served (OwnerSocketServer:
/// the socket is 0600, and each connection's peer must be this process's user, root included).
///
/// The agent decides nothing itself: a key is listed and used through the service for the
/// connection's caller (uid, pid, executable), so the decision point and the key's own access
/// control apply as for every face.
package final class AgentServer: Sendable {
    private let server: OwnerSocketServer
    private let keyring: AgentKeyring
    /// The salted hash of the passphrase the agent was locked with (`ssh-add -x`); nil: unlocked.
    private let lock = Locked<(salt: [UInt8], hash: [UInt8])?>(nil)
    private let log: @Sendable (String) -> Void

    /// How many clients are served at once; more are closed at once (each holds a thread).
    package static let connectionLimit = 64

    package var socketPath: String { server.socketPath }

    /// Listens on `socketPath` (a stale socket there of this user's is replaced).
    ///
    /// - Throws: ``OwnerSocketServerError`` when the socket cannot be made.
    package init(
        socketPath: String, keyring: AgentKeyring, log: @escaping @Sendable (String) -> Void
    ) throws(OwnerSocketServerError) {
        server = try OwnerSocketServer(
            socketPath: socketPath, name: "agent", connectionLimit: Self.connectionLimit, log: log)
        self.keyring = keyring
        self.log = log
    }

    /// Serves `descriptor`, a listening Unix socket a service manager made and handed over
    /// (systemd socket activation: its unit sets the socket's mode and its directory's). The
    /// owner-only check on each connection is the agent's as with a socket of its own.
    package init(
        listeningOn descriptor: Int32, keyring: AgentKeyring, log: @escaping @Sendable (String) -> Void
    ) {
        server = OwnerSocketServer(
            listeningOn: descriptor, name: "agent", connectionLimit: Self.connectionLimit, log: log)
        self.keyring = keyring
        self.log = log
    }

    /// Accepts and answers connections until ``stop()``.
    package func serve() {
        server.serve { [self] connection, pid, uid in answer(connection, pid: pid, uid: uid) }
    }

    /// Stops accepting (connections being answered finish their current message) and removes the socket.
    package func stop() {
        server.stop()
    }

    // MARK: One connection

    private func answer(_ connection: Int32, pid: Int32, uid: UInt32) {
        // Who asks, from the kernel: the process held by its pidfd while /proc is read.
        let peer = AccessCaller.peer(of: connection, pid: pid, uid: uid, face: .sshAgent)
        var state = ConnectionState(caller: peer.caller, pid: pid, identity: peer.identity)
        while var body = OwnerSocketServer.readMessage(connection, maximumLength: AgentRequest.maximumLength) {
            let response: AgentResponse
            // The message may hold a lock passphrase: its bytes do not outlive their answer.
            defer { erase(&body) }
            var request: AgentRequest
            do throws(AgentProtocolError) {
                request = try AgentRequest(parsing: body)
            } catch {
                log("closed a connection of pid \(pid): \(error.description)")
                return
            }
            response = respond(to: request, on: &state)
            // A lock passphrase's parsed copy does not outlive its answer either.
            request.erasePassphrase()
            do {
                try sendAll(connection, response.framed)
            } catch {
                return // The client hung up.
            }
        }
    }

    /// What the agent knows of one connection: who it is, and the host its session is bound to.
    package struct ConnectionState: Sendable {
        package let caller: AccessCaller
        package let pid: Int32
        /// What the kernel says of the peer (chain, unit, app id, executable's hash); nil when it
        /// ended before it could be read.
        package let identity: CallerIdentity?
        /// Set by `session-bind@openssh.com`: the host (by its key) the client's session reaches.
        package var binding: SessionBinding?

        package init(caller: AccessCaller, pid: Int32, identity: CallerIdentity? = nil) {
            self.caller = caller
            self.pid = pid
            self.identity = identity
        }

        /// The pid, and what the kernel says of where the program comes from.
        private var details: String { identity?.details ?? "pid \(pid)" }

        /// The program as the person asked reads it (``AccessCaller/describe(executable:identity:pid:)``).
        var requester: String { AccessCaller.describe(executable: caller.executable, identity: identity, pid: pid) }

        /// The program, its details and, once bound, the host, as the log reads them.
        var description: String {
            "\(caller.executable ?? "an unknown program") (\(details))"
                + (binding.map { ", to " + $0.description } ?? "")
        }
    }

    package func respond(to request: AgentRequest, on state: inout ConnectionState) -> AgentResponse {
        let caller = state.caller
        let locked = lock.withLock { $0 != nil }
        switch request {
        case .requestIdentities:
            if locked { return .identities([]) }
            do {
                return .identities(
                    try keyring.keys(for: caller).map { (SSHECDSAKey.blob(publicKey: $0.publicKey), $0.comment) })
            } catch {
                log("listing keys for \(state.description) failed: \(error.message)")
                return .failure
            }
        case .sign(let blob, let data, _):
            guard !locked,
                let signature = signature(
                    state,
                    { () throws(KeychainError) in
                        try keyring.sign(
                            data, withKeyBlob: blob, for: caller, requester: state.requester,
                            destination: state.binding?.description)
                    })
            else { return .failure }
            return .signature(signature)
        case .addIdentity:
            log(
                "refused to add a key for \(state.description): keys are made in the TPM (tpm-keychain key create --label NAME --tag ssh), not handed to the agent"
            )
            return .failure
        case .removeIdentity, .removeAllIdentities:
            log("refused to remove keys: remove one from the keychain with tpm-keychain key delete")
            return .failure
        case .lock(let passphrase):
            return lock.withLock { state -> AgentResponse in
                guard state == nil else { return .failure }
                let salt = (0..<16).map { _ in UInt8.random(in: 0...255) }
                state = (salt, Self.hash(passphrase, salt: salt))
                return .success
            }
        case .unlock(let passphrase):
            let unlocked = lock.withLock { state -> Bool in
                guard let held = state, Self.hash(passphrase, salt: held.salt) == held.hash else { return false }
                state = nil
                return true
            }
            // A wrong passphrase costs the guesser time, as OpenSSH's agent makes it.
            if !unlocked { SystemCalls.sleep(for: .milliseconds(100)) }
            return unlocked ? .success : .failure
        case .extension(Self.signDigest, let contents):
            // PKCS#11's CKM_ECDSA (the module in Sources/PKCS11Module): a digest made by the caller.
            var reader = SSHWireReader(contents)
            guard !locked, let blob = try? reader.string(), let digest = try? reader.string(), reader.isAtEnd,
                let signature = signature(
                    state,
                    { () throws(KeychainError) in
                        try keyring.sign(
                            digest: digest, withKeyBlob: blob, for: caller, requester: state.requester,
                            destination: state.binding?.description)
                    })
            else { return .failure }
            var answer = SSHWireWriter()
            answer.string(signature)
            return .extensionAnswer(answer.bytes)
        case .extension(Self.certificates, let contents):
            // PKCS#11's CKO_CERTIFICATE objects: the offered keys' certificates, nothing asked.
            guard !locked, contents.isEmpty else { return locked ? .extensionAnswer([0, 0, 0, 0]) : .failure }
            do {
                let certificates = try keyring.certificates(for: caller)
                var answer = SSHWireWriter()
                answer.uint32(UInt32(certificates.count))
                for certificate in certificates {
                    answer.string(certificate.keyBlob)
                    answer.string(certificate.der)
                    answer.string(certificate.subject)
                    answer.string(certificate.issuer)
                    answer.string(certificate.serialNumber)
                }
                return .extensionAnswer(answer.bytes)
            } catch {
                log("listing certificates for \(state.description) failed: \(error.message)")
                return .failure
            }
        case .extension(Self.storeName, let contents):
            // The PKCS#11 module's token label: which store this agent serves.
            guard contents.isEmpty else { return .failure }
            var answer = SSHWireWriter()
            answer.string(keyring.storeName)
            return .extensionAnswer(answer.bytes)
        case .extension(Self.sessionBind, let contents):
            // A session is bound once; later binds only through forwarding hops (as OpenSSH's agent).
            guard let binding = SessionBinding(fields: contents),
                state.binding == nil || binding.isForwarding
            else {
                log("refused a session binding from \(state.description)")
                return .failure
            }
            state.binding = binding
            return .success
        case .extension:
            return .extensionFailure
        case .other:
            return .failure
        }
    }

    /// The extension that signs a digest the caller made: string key blob, string digest.
    package static let signDigest = "sign-digest@tpm-keychain"
    /// The extension that lists the offered keys' certificates: no fields; the answer is a
    /// uint32 count, then per certificate the strings key blob, DER, subject, issuer, serial.
    package static let certificates = "certificates@tpm-keychain"
    /// The extension that names the store the agent serves (its directory's name): no fields;
    /// the answer is one string.
    package static let storeName = "store@tpm-keychain"
    /// OpenSSH's extension that binds a connection to the host its session reaches.
    package static let sessionBind = "session-bind@openssh.com"

    /// A signature blob from `make` (r ‖ s), or nil when the key is not offered or the use refused; logged either way.
    private func signature(
        _ state: ConnectionState, _ make: () throws(KeychainError) -> [UInt8]?
    ) -> [UInt8]? {
        do {
            guard let rs = try make(), let signature = SSHECDSAKey.signatureBlob(rs: rs) else {
                log("\(state.description) asked for a signature by a key the agent does not offer")
                return nil
            }
            log("signed for \(state.description)")
            return signature
        } catch {
            log("refused a signature for \(state.description): \(error.message)")
            return nil
        }
    }

    // MARK: Helpers

    private static func hash(_ passphrase: [UInt8], salt: [UInt8]) -> [UInt8] {
        Array(SHA256.hash(data: salt + passphrase))
    }
}
