import KeychainStore
import KeychainVocabulary
package import SystemCalls
import WireFormat

/// The session holder (`tpm-keychain hold-session`): keeps the user's stores open for the login
/// session and answers the reads of short-lived processes (``SessionHolder``) with no TPM
/// command. It never hands out a key: it answers each read through the service, for the caller
/// the kernel names (uid from SO_PEERCRED, the executable through its pidfd), so the decision
/// point decides as for the caller's own path. It answers only reads of items under the master
/// key; an item that needs a person or the TPM is answered "cold", and the caller opens it itself.
///
/// At a lock (``HolderRequest/lock``, sent by every lock of the device) it erases every key it
/// holds and answers "cold" until an unlock; at ``stop()`` it erases them too.
package final class SessionHolderServer: Sendable {
    private let server: OwnerSocketServer
    /// When stores may be held, and how many times their keys were erased: a read that began
    /// before an erasure lets go of what it opened and answers "cold". Neither a lock nor an
    /// erasure waits for a read, which may be waiting for a TPM up to its timeout.
    private let holding = Locked(Holding())

    private struct Holding: Sendable {
        /// The keychain was locked since the last unlock.
        var locked = false
        /// Why reads are answered "cold" for now (``holdBack(_:)``); nil when they are not.
        var heldBack: String?
        /// Between logind's announcement of a suspend and the wake (``sleeping(_:)``).
        var asleep = false
        /// ``stop()`` was called: for good.
        var stopped = false
        var erasures: UInt64 = 0

        /// Why nothing may be held now; nil when stores may be.
        var refusal: String? {
            if stopped { return "the holder has stopped" }
            if locked { return "the keychain is locked" }
            if asleep { return "the machine is suspending" }
            return heldBack
        }
    }
    /// The stores this holder has answered from since it last erased its keys: what a lock or
    /// ``stop()`` closes. Only those: a process that runs a holder beside other work (a test
    /// suite, a program embedding it) keeps its own stores open.
    private let served = Locked<Set<KeychainLocation>>([])
    private let log: @Sendable (String) -> Void

    /// How many clients are served at once (each holds a thread while it reads).
    package static let connectionLimit = 64
    /// How long the holder waits for a client's request, or for room to send its answer: a
    /// client sends at once and reads at once (``SessionHolder``), so one silent or stopped for
    /// longer is let go and its place freed.
    package static let clientWaitLimitSeconds = 10

    package var socketPath: String { server.socketPath }

    /// Listens on `socketPath` (a stale socket there of this user's is replaced).
    ///
    /// - Throws: ``OwnerSocketServerError`` when the socket cannot be made.
    /// - Parameter clientWaitLimitSeconds: ``clientWaitLimitSeconds``; tests give less.
    package init(
        socketPath: String, clientWaitLimitSeconds: Int = SessionHolderServer.clientWaitLimitSeconds,
        log: @escaping @Sendable (String) -> Void
    ) throws(OwnerSocketServerError) {
        server = try OwnerSocketServer(
            socketPath: socketPath, name: "session holder", connectionLimit: Self.connectionLimit,
            waitLimitSeconds: clientWaitLimitSeconds, log: log)
        self.log = log
    }

    /// Serves `descriptor`, a listening socket a service manager handed over.
    package init(listeningOn descriptor: Int32, log: @escaping @Sendable (String) -> Void) {
        server = OwnerSocketServer(
            listeningOn: descriptor, name: "session holder", connectionLimit: Self.connectionLimit,
            waitLimitSeconds: Self.clientWaitLimitSeconds, log: log)
        self.log = log
    }

    /// Answers connections until ``stop()``.
    package func serve() {
        server.serve { [self] connection, pid, uid in answer(connection, pid: pid, uid: uid) }
    }

    /// Stops answering and erases every key held.
    package func stop() {
        server.stop()
        eraseKeys { $0.stopped = true }
    }

    /// Erases every key held (a locked screen): the next read opens its store again.
    package func eraseHeldKeys(because reason: String) {
        eraseKeys()
        log("\(reason): every key held is erased")
    }

    /// Erases every key held when the machine is about to suspend (`starting`), and answers
    /// every read "cold" until the wake (not `starting`): a read between the announcement and
    /// the freeze would otherwise hold a store through the suspend.
    package func sleeping(_ starting: Bool) {
        if starting {
            eraseKeys { $0.asleep = true }
            log("the machine is about to suspend: every key held is erased")
        } else {
            holding.withLock { $0.asleep = false }
        }
    }

    /// Erases every key held and answers every read "cold" while `reason` is not nil (the
    /// session's screen is locked, or logind can no longer say whether it is); nil serves reads
    /// again.
    package func holdBack(_ reason: String?) {
        if let reason {
            eraseKeys { $0.heldBack = reason }
            log("\(reason): every key held is erased, and reads are answered cold meanwhile")
        } else {
            holding.withLock { $0.heldBack = nil }
            log("reads are answered again")
        }
    }

    /// Closes every store this holder answered from: their keys are erased from memory. Counted
    /// first (with `change` to when stores may be held), so that a read in progress, which may
    /// open its store again, lets it go when it ends.
    private func eraseKeys(_ change: (inout Holding) -> Void = { _ in }) {
        // `served` is emptied in the same step: a read that begins after it sees the new count,
        // and one that began before has its location in what is closed here.
        let locations = holding.withLock { holding in
            holding.erasures &+= 1
            change(&holding)
            return served.withLock { served in
                defer { served.removeAll() }
                return served
            }
        }
        for location in locations { OpenStores.close(location) }
    }

    // MARK: One connection

    private func answer(_ connection: Int32, pid: Int32, uid: UInt32) {
        // The program, from the kernel: the process held by its pidfd while /proc is read.
        let executable = PinnedProcess(peerOf: connection, pid: pid)?.executable ?? executablePath(ofProcess: pid)
        while let body = OwnerSocketServer.readMessage(connection, maximumLength: HolderRequest.maximumLength) {
            let response: HolderResponse
            do throws(WireFormatError) {
                response = respond(to: try HolderRequest(parsing: body), uid: uid, executable: executable)
            } catch {
                log("closed a connection of pid \(pid): \(error.message)")
                return
            }
            // The answer may hold secrets: neither its encoding nor its framed copy outlives the sending.
            var encoded = response.encoded
            var answer = OwnerSocketServer.framed(encoded)
            erase(&encoded)
            defer { erase(&answer) }
            do {
                try sendAll(connection, answer)
            } catch {
                return // The client hung up.
            }
        }
    }

    package func respond(to request: HolderRequest, uid: UInt32, executable: String?) -> HolderResponse {
        switch request {
        case .lock:
            eraseKeys { $0.locked = true }
            log("the keychain was locked: every key held is erased")
            return .done
        case .unlock:
            holding.withLock { $0.locked = false }
            return .done
        case .value(let target, let identity):
            return read(target, uid: uid, executable: executable) { (service) throws(KeychainError) in
                .value(try service.valueUnderMasterKey(identity))
            }
        case .item(let target, let itemClass, let primary, let withSecret):
            return read(target, uid: uid, executable: executable) { (service) throws(KeychainError) in
                .results(
                    try service.item(itemClass, primary: primary, withSecret: withSecret).map { [$0] } ?? [])
            }
        case .query(let target, let query):
            return read(target, uid: uid, executable: executable) { (service) throws(KeychainError) in
                .results(try service.query(query.query))
            }
        }
    }

    /// `body`'s answer through a service for the caller on the store `target` names; "cold" while
    /// locked, for a face that holds its own stores, and for every error (the caller's own path
    /// then meets it, with its message).
    private func read(
        _ target: HolderRequest.HolderStore, uid: UInt32, executable: String?,
        _ body: (ItemService) throws(KeychainError) -> HolderResponse
    ) -> HolderResponse {
        guard SessionHolder.warmFaces.contains(target.face) else { return .cold("the face holds its own stores") }
        var location: KeychainLocation
        do throws(KeychainError) {
            location = try KeychainLocation(path: target.path, tcti: target.tcti)
        } catch {
            return .cold(error.message)
        }
        location.deviceDirectory = target.deviceDirectory
        let caller = AccessCaller(
            face: target.face, uid: uid, source: .peerCredentials, accessGroups: target.accessGroups,
            executable: executable)
        // Recorded in `served` before the store is opened, so that an erasure meanwhile closes it.
        let begun = holding.withLock { holding -> (erasures: UInt64, refusal: String?) in
            if let refusal = holding.refusal { return (holding.erasures, refusal) }
            served.withLock { _ = $0.insert(location) }
            return (holding.erasures, nil)
        }
        if let refusal = begun.refusal { return .cold(refusal) }
        // A store removed (and perhaps made again) since it was opened here is let go: the
        // caller's own path would open what is at the path now, and so does this.
        if let store = OpenStores.openStore(at: location), !store.isStillAtItsPath() {
            OpenStores.close(location)
        }
        let answer = Result { () throws(KeychainError) in
            try body(try ItemService(location: location, caller: caller))
        }
        // Erased while this read ran: the store it may have opened again is let go, and the
        // answer with it (the caller's own path decides after the lock).
        guard holding.withLock({ $0.refusal == nil && $0.erasures == begun.erasures }) else {
            OpenStores.close(location)
            return .cold("the keys were erased while this read ran")
        }
        switch answer {
        case .success(let response): return response
        case .failure(let error): return .cold(error.message)
        }
    }
}
