import KeychainStore
import KeychainVocabulary
import SystemCalls

#if canImport(Glibc)
import Glibc
#endif

/// The warm path's client side: a short-lived process of the user asks the session holder
/// (``SessionHolderServer``, `tpm-keychain hold-session`), which keeps the user's stores open
/// for the login session, instead of unsealing a store itself (docs/ARCHITECTURE.md, "The warm
/// path"). Only reads of items under the master key are answered; anything else, and every
/// failure to reach the holder, falls back to the caller's own cold path with the same result.
package enum SessionHolder {
    /// The holder's socket; empty turns the warm path off.
    package static let socketVariable = "TPM_KEYCHAIN_SESSION_HOLDER"

    /// How long a read may wait for the holder. Its first read of a store opens it (one TPM
    /// unseal); a holder that hangs longer costs a caller this much once, then the cold path.
    static let timeoutSeconds = 5

    /// `TPM_KEYCHAIN_SESSION_HOLDER`, else `$XDG_RUNTIME_DIR/tpm-keychain/session.socket`; nil
    /// when neither names one. Read with getenv: a lookup does not pay for the whole environment.
    package static var socketPath: String? {
        if let chosen = getenv(socketVariable) {
            let path = String(cString: chosen)
            return path.hasPrefix("/") ? path : nil
        }
        guard let runtime = getenv("XDG_RUNTIME_DIR").map({ String(cString: $0) }), runtime.hasPrefix("/") else {
            return nil
        }
        return runtime + "/tpm-keychain/session.socket"
    }

    /// How many reads a process sends the holder before it opens the store itself: a process
    /// that reads this often lives long enough to gain from its own open (a read in process is
    /// microseconds, a round trip to the holder a tenth of a millisecond), and pays what it
    /// would have paid without a holder, once.
    static let readsBeforeOpening = 32
    private static let readsSent = Locked<Int>(0)

    /// Counts one read for the holder; false once this process has sent ``readsBeforeOpening``.
    static func mayAskAgain() -> Bool {
        readsSent.withLock { sent in
            guard sent < readsBeforeOpening else { return false }
            sent += 1
            return true
        }
    }

    /// The faces of short-lived processes. The daemons (Secret Service, ssh agent) hold their
    /// stores open themselves.
    static let warmFaces: Set<AccessCaller.Face> = [.keychain, .secItem, .keychainStorage, .cli, .gitHelper]

    /// Whether `caller` at `location`, a store not open in this process (then it is warm here),
    /// may read through the holder: a caller of a short-lived face in this process, no session
    /// lock set in code (the holder would not see it), a TPM the holder can reach as the caller
    /// does, and a holder socket in place.
    static func mayServe(_ caller: AccessCaller, at location: KeychainLocation) -> Bool {
        guard caller.source == .thisProcess, warmFaces.contains(caller.face), location.sessionLock == nil,
            store(for: location, caller: caller) != nil, readsSent.withLock({ $0 < readsBeforeOpening }),
            let path = socketPath
        else { return false }
        var status = stat()
        return lstat(path, &status) == 0 && status.st_mode & S_IFMT == S_IFSOCK
    }

    /// The store and caller as a request names them; nil for a store with its own simulated TPM,
    /// which this process started already (the holder would wait for its lock), and for one no
    /// request can carry (``HolderRequest/HolderStore/fitsARequest``).
    package static func store(for location: KeychainLocation, caller: AccessCaller) -> HolderRequest.HolderStore? {
        let tcti: String?
        switch location.tpm {
        // TPM_KEYCHAIN_TCTI as this process has it: the holder's own environment may differ.
        case .automatic:
            tcti = getenv("TPM_KEYCHAIN_TCTI").map { String(cString: $0) }.flatMap { $0.isEmpty ? nil : $0 }
        case .automaticOrSimulated: return nil
        case .tcti(let chosen): tcti = chosen
        case .chosen(let tpm):
            if case .simulatedInStore = tpm.source { return nil }
            tcti = tpm.configuration.tcti
        }
        let store = HolderRequest.HolderStore(
            path: location.path, tcti: tcti, deviceDirectory: location.deviceDirectory, face: caller.face,
            accessGroups: caller.accessGroups)
        return store.fitsARequest ? store : nil
    }

    /// The holder's answer to `request`; nil when there is no holder or it could not answer.
    static func ask(_ request: HolderRequest) -> HolderResponse? {
        guard let path = socketPath else { return nil }
        let connection: Int32
        do throws(OwnedSocketFailure) {
            connection = try connectToOwnedSocket(path, owner: UInt32(geteuid()), timeoutSeconds: timeoutSeconds)
        } catch {
            return nil
        }
        defer { close(connection) }
        do {
            try sendAll(connection, OwnerSocketServer.framed(request.encoded))
        } catch {
            return nil
        }
        guard var body = OwnerSocketServer.readMessage(connection, maximumLength: HolderResponse.maximumLength)
        else { return nil }
        // The answer may hold secrets: the bytes read do not outlive their parsing.
        defer { erase(&body) }
        return try? HolderResponse(parsing: body)
    }

    /// Tells a running holder that the keychain was locked or unlocked; nothing when none runs.
    package static func tell(_ change: HolderRequest) {
        _ = ask(change)
    }
}
