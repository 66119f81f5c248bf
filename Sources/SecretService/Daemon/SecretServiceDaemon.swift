import DBus
import FoundationEssentials
import SystemCalls
package import TPMKeychain

/// The Secret Service daemon (`tpm-keychain secret-service`): owns `org.freedesktop.secrets` on a
/// session bus and answers from the stores of one data directory until it loses the name, the
/// bus goes away, or it is stopped. One thread; idle, it sleeps in poll(2).
package enum SecretServiceDaemon {
    package static let busName = "org.freedesktop.secrets"

    package struct Options: Sendable {
        /// A D-Bus address; nil for the session bus (`DBUS_SESSION_BUS_ADDRESS`).
        package var address: String?
        /// Take the name from the provider that owns it (if it allows replacement).
        package var replace = false
        /// Where the collections' stores are (``KeychainLocation/dataDirectory`` by default).
        package var dataDirectory: String
        /// Append a line per access to this file (caller, action, labels; never a secret).
        package var auditLog: String?
        /// The biometric authenticator unlock prompts use (fprintd), if any.
        package var authenticator: (any Authenticator)?
        /// Where unlock prompts get the device passcode, if anywhere.
        package var passcode: PasscodeSource?
        /// Asks the person whether a read may go ahead (a confirm-each-access collection): the
        /// question in, their answer out.
        package var confirm: (@Sendable (String) async -> Confirmation)?
        /// The login session's lock (logind): when it locks, every collection locks and its
        /// opened keys are dropped.
        package var sessionLock: (any SessionLockState)?
        /// Whether a new collection may be sealed to a simulated TPM kept in its store when no TPM
        /// is usable (`--allow-simulated`, `TPM_KEYCHAIN_ALLOW_SIMULATED=1`); otherwise creating
        /// it fails with what to do. Such a collection is reported as SIMULATED.
        package var allowsSimulatedTPM = false
        /// Also serve the Secret portal's backend (``SecretPortalBackend``) for xdg-desktop-portal.
        package var servesPortal = false

        package init(address: String?, dataDirectory: String) {
            self.address = address
            self.dataDirectory = dataDirectory
        }
    }

    /// Why the daemon stopped.
    package enum Ending: Equatable, Sendable {
        /// Another provider took the name (`--replace`).
        case replaced
        /// The bus closed the connection.
        case busClosed
        /// ``Stopper/stop()`` was called (SIGTERM, SIGINT).
        case stopped
    }

    package enum Failure: Error, CustomStringConvertible {
        case nameOwned(owner: String)
        case bus(String)
        case setup(String)

        package var description: String {
            switch self {
            case .nameOwned(let owner):
                "another Secret Service provider owns \(SecretServiceDaemon.busName) on this bus (\(owner)); stop it, or pass --replace to take the name over"
            case .bus(let message): "the session bus: \(message)"
            case .setup(let message): message
            }
        }
    }

    /// Stops a running daemon from another thread. Its wake-up also carries the prompts' outcomes.
    package final class Stopper: Sendable {
        let wakeup: Wakeup
        let stopped = Locked(false)
        package init() throws { wakeup = try Wakeup() }
        package func stop() {
            stopped.withLock { $0 = true }
            wakeup.signal()
        }
    }

    /// Runs until the name is lost, the bus closes or `stopper` stops it; `ready` is called once
    /// the name is owned (the daemon answers from then on).
    ///
    /// - Throws: ``Failure`` when the bus cannot be reached or the name is owned by another provider.
    package static func run(
        _ options: Options, stopper: Stopper, warn: (String) -> Void = { _ in }, ready: () -> Void = {}
    ) throws(Failure) -> Ending {
        let connection: BusConnection
        do {
            connection = try BusConnection(
                address: options.address, sessionBus: options.address == nil, description: "tpm-keychain-secrets",
                methodCallTimeout: .seconds(25))
        } catch {
            throw .bus(error.description)
        }
        let audit: AuditLog?
        do {
            audit = try options.auditLog.map { try AuditLog(path: $0) }
        } catch {
            throw .setup("\(error)")
        }
        let registry = SecretServiceRegistry(
            connection: connection, dataDirectory: options.dataDirectory, audit: audit,
            authenticator: options.authenticator, passcode: options.passcode, confirm: options.confirm,
            newStoreTPM: options.allowsSimulatedTPM ? .automaticOrSimulated : .automatic, wakeup: stopper.wakeup)
        defer { registry.close() }
        do {
            try ServiceObject(registry: registry).ensureDefaultCollection()
        } catch {
            // The daemon still serves: CreateCollection can make it later, and says why it cannot.
            warn("the default collection could not be created: \(error.message)")
        }
        for collection in registry.sortedCollections() where collection.isSimulated {
            warn("the collection \"\(collection.name)\" is sealed to a simulated TPM: \(collection.tpmDescription)")
        }
        var ending: Ending?
        do {
            try connection.serve(under: ObjectPaths.service) { registry.handle($0) }
            if options.servesPortal {
                try connection.serve(under: SecretPortalBackend.path) { registry.handlePortal($0) }
            }
            let driver = SignalSender.busDriver
            driver.acceptsUnicast = true
            try connection.subscribe(
                from: driver, name: BusDriver.name, path: BusDriver.path, interface: BusDriver.interface,
                member: "NameLost"
            ) { reader in
                if reader.readString() == busName { ending = .replaced }
            }
            try connection.subscribe(
                rule:
                    "type='signal',sender='\(BusDriver.name)',path='\(BusDriver.path)',interface='\(BusDriver.interface)',member='NameOwnerChanged',arg2=''",
                from: .busDriver
            ) { reader in
                // arg0 = name, arg1 = old owner, arg2 = new owner (empty: the connection left).
                guard let name = reader.readString(), name.hasPrefix(":") else { return }
                registry.forget(name)
            }
            if try connection.requestName(busName, replacing: options.replace) == .ownedByAnother {
                let owner = (try? connection.nameOwner(busName)) ?? "unknown owner"
                let peer = try? connection.peer(owner)
                throw Failure.nameOwned(
                    owner: peer.map { "pid \($0.pid), \($0.executable ?? "unknown executable")" } ?? owner)
            }
            if options.servesPortal,
                try connection.requestName(SecretPortalBackend.busName, replacing: options.replace) == .ownedByAnother
            {
                warn("not serving the Secret portal: another process owns \(SecretPortalBackend.busName)")
            }
        } catch let failure as Failure {
            throw failure
        } catch {
            throw .bus("\(error)")
        }
        ready()
        while ending == nil {
            do {
                while try connection.process() {
                    if ending != nil { break }
                    // A stream of calls (a bulk fill) still sends its batched Items values.
                    _ = registry.sendDueItemsSignals()
                }
                if ending != nil { break }
                registry.followSessionLock(options.sessionLock)
                // Following the session lock: a look each second (LogindSessionLock answers from
                // its own cache); a batched Items signal when it is due; otherwise the loop sleeps
                // until a message or the wake-up.
                let nextLook = ContinuousClock.now + .seconds(options.sessionLock == nil ? 3600 : 1)
                let nextSignal = registry.sendDueItemsSignals()
                let outcome = try connection.wait(
                    until: min(nextLook, nextSignal ?? nextLook), wakeup: stopper.wakeup.descriptor)
                if outcome == .woken {
                    stopper.wakeup.drain()
                    if stopper.stopped.withLock({ $0 }) { ending = .stopped }
                    registry.applyPromptOutcomes()
                }
            } catch {
                ending = .busClosed
            }
        }
        return ending ?? .stopped
    }
}
