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
    /// Whether the keychain was locked since the last unlock: nothing is held until it is unlocked.
    private let locked = Locked<Bool>(false)
    /// The stores this holder has answered from since it last erased its keys: what a lock or
    /// ``stop()`` closes. Only those: a process that runs a holder beside other work (a test
    /// suite, a program embedding it) keeps its own stores open.
    private let served = Locked<Set<KeychainLocation>>([])
    private let log: @Sendable (String) -> Void

    /// How many clients are served at once (each holds a thread while it reads).
    package static let connectionLimit = 64

    package var socketPath: String { server.socketPath }

    /// Listens on `socketPath` (a stale socket there of this user's is replaced).
    ///
    /// - Throws: ``OwnerSocketServerError`` when the socket cannot be made.
    package init(socketPath: String, log: @escaping @Sendable (String) -> Void) throws(OwnerSocketServerError) {
        server = try OwnerSocketServer(
            socketPath: socketPath, name: "session holder", connectionLimit: Self.connectionLimit, log: log)
        self.log = log
    }

    /// Serves `descriptor`, a listening socket a service manager handed over.
    package init(listeningOn descriptor: Int32, log: @escaping @Sendable (String) -> Void) {
        server = OwnerSocketServer(
            listeningOn: descriptor, name: "session holder", connectionLimit: Self.connectionLimit, log: log)
        self.log = log
    }

    /// Answers connections until ``stop()``.
    package func serve() {
        server.serve { [self] connection, pid, uid in answer(connection, pid: pid, uid: uid) }
    }

    /// Stops answering and erases every key held.
    package func stop() {
        server.stop()
        eraseKeys()
    }

    /// Erases every key held (a suspend, a locked screen): the next read opens its store again.
    package func eraseHeldKeys(because reason: String) {
        // Under the lock flag: a read in progress finishes first.
        locked.withLock { _ in eraseKeys() }
        log("\(reason): every key held is erased")
    }

    /// Closes every store this holder answered from: their keys are erased from memory.
    private func eraseKeys() {
        let locations = served.withLock { served in
            defer { served.removeAll() }
            return served
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
            locked.withLock { locked in
                locked = true
                eraseKeys()
            }
            log("the keychain was locked: every key held is erased")
            return .done
        case .unlock:
            locked.withLock { $0 = false }
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
        do throws(KeychainError) {
            var location = try KeychainLocation(path: target.path, tcti: target.tcti)
            location.deviceDirectory = target.deviceDirectory
            let caller = AccessCaller(
                face: target.face, uid: uid, source: .peerCredentials, accessGroups: target.accessGroups,
                executable: executable)
            // Under the lock flag: a lock arriving meanwhile waits, then erases what this opened.
            return try locked.withLock { (locked) throws(KeychainError) -> HolderResponse in
                guard !locked else { return .cold("the keychain is locked") }
                // A store removed (and perhaps made again) since it was opened here is let go:
                // the caller's own path would open what is at the path now, and so does this.
                if let held = OpenStores.openStore(at: location), !held.isStillAtItsPath() {
                    OpenStores.close(location)
                }
                served.withLock { _ = $0.insert(location) }
                return try body(try ItemService(location: location, caller: caller))
            }
        } catch {
            return .cold(error.message)
        }
    }
}
