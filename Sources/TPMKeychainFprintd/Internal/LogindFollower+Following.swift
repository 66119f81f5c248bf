// Following the session's LockedHint once it is found: properties and Lock/Unlock signals on the
// follower's connection, until it is stopped.

import DBus
import Dispatch
import SystemCalls

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

extension LogindFollower {
    func subscribe(_ followed: FollowedSession, on bus: BusConnection) throws(LogindSessionLockError) {
        do {
            // logind's owner first, then who it is now: a restart after the answer is seen.
            try bus.subscribe(rule: BusDriver.ownerChangedRule(for: Logind.service), from: .busDriver) { message in
                guard message.readString() == Logind.service, message.readString() != nil,
                    let owner = message.readString()
                else { return }
                followed.logindOnBus = !owner.isEmpty
                followed.logind.uniqueName = owner.isEmpty ? nil : owner
                // A logind gone holds no inhibitor of ours; one back on the bus is asked again.
                followed.releaseInhibitor()
                // Back on the bus (restarted): what it says now replaces what was cached.
                if !owner.isEmpty {
                    followed.needsRead = true
                    followed.needsInhibitor = aroundSleep != nil
                    // A logind that restarts is awake, whatever wake it did not announce.
                    if followed.asleep {
                        followed.asleep = false
                        aroundSleep?(false)
                    }
                }
            }
        } catch {
            throw LogindSessionLockError(.busUnavailable, "The bus refused a subscription: \(error)", underlying: error)
        }
        do {
            followed.logind.uniqueName = try bus.nameOwner(Logind.service)
        } catch {
            throw Self.failure(error, asking: "GetNameOwner")
        }
        do {
            try bus.subscribe(
                from: followed.logind, name: Logind.service, path: followed.path, interface: Logind.propertiesInterface,
                member: "PropertiesChanged"
            ) { message in
                Self.propertiesChanged(&message, followed)
            }
            try bus.subscribe(
                from: followed.logind, name: Logind.service, path: followed.path, interface: Logind.sessionInterface,
                member: "Lock"
            ) { _ in
                followed.lockRequested = true
            }
            try bus.subscribe(
                from: followed.logind, name: Logind.service, path: followed.path, interface: Logind.sessionInterface,
                member: "Unlock"
            ) { _ in
                followed.lockRequested = false
            }
            try bus.subscribe(
                from: followed.logind, name: Logind.service, path: Logind.managerPath,
                interface: Logind.managerInterface,
                member: "SessionRemoved"
            ) { message in
                _ = message.readString()
                if message.readString("o") == followed.path { followed.ended = true }
            }
            // The machine is about to suspend or hibernate (true), or has woken (false).
            try bus.subscribe(
                from: followed.logind, name: Logind.service, path: Logind.managerPath,
                interface: Logind.managerInterface, member: "PrepareForSleep"
            ) { message in
                switch message.readBool() {
                case true?:
                    followed.timesSuspended += 1
                    followed.asleep = true
                    // Done before logind may go on: it waits for the inhibitor to close.
                    if let aroundSleep {
                        aroundSleep(true)
                        followed.releaseInhibitor()
                    }
                case false?:
                    followed.asleep = false
                    aroundSleep?(false)
                    followed.needsInhibitor = aroundSleep != nil
                case nil:
                    break
                }
            }
        } catch {
            throw LogindSessionLockError(.busUnavailable, "The bus refused a subscription: \(error)", underlying: error)
        }
    }

    /// PropertiesChanged(s interface, a{sv} changed, as invalidated). logind sends LockedHint's new
    /// value; an invalidated one, or anything unreadable, is read again.
    static func propertiesChanged(_ message: inout BusMessageReader, _ followed: FollowedSession) {
        guard let interface = message.readString() else {
            followed.needsRead = true
            return
        }
        guard interface == Logind.sessionInterface else { return }
        guard message.enter("a", "{sv}") else {
            followed.needsRead = true
            return
        }
        while message.enter("e", "sv") {
            guard let name = message.readString() else {
                followed.needsRead = true
                return
            }
            if name == Logind.lockedHint {
                guard let value = message.readVariantBool() else {
                    followed.needsRead = true
                    return
                }
                followed.lockedHint = value
                followed.lockRequested = false
                followed.readFailure = nil
            } else if !message.skip("v") {
                followed.needsRead = true
                return
            }
            guard message.exit() else {
                followed.needsRead = true
                return
            }
        }
        guard message.exit(), let invalidated = message.readStringArray() else {
            followed.needsRead = true
            return
        }
        if invalidated.contains(Logind.lockedHint) {
            followed.lockRequested = false
            followed.needsRead = true
        }
    }

    func readLockedHint(_ path: String, on bus: BusConnection) throws(LogindSessionLockError) -> Bool {
        let value: Bool?
        do {
            value = try bus.call(
                destination: Logind.service, path: path, interface: Logind.propertiesInterface, member: "Get",
                arguments: [.string(Logind.sessionInterface), .string(Logind.lockedHint)],
                read: { $0.readVariantBool() }
            )
        } catch  where Self.sessionIsGone(error) {
            throw LogindSessionLockError(
                .noSession, "The session \(path) no longer exists (\(error))", underlying: error)
        } catch {
            throw Self.failure(error, asking: "LockedHint")
        }
        guard let value else {
            throw LogindSessionLockError(.unexpectedReply, "logind's LockedHint of \(path) is not a boolean")
        }
        return value
    }

    /// Processes notifications until the wakeup is signalled (return) or the connection fails
    /// (the cache then holds `.connectionLost`).
    func follow(_ followed: FollowedSession, on bus: BusConnection) {
        while true {
            do {
                while try bus.process() {}
                if followed.needsInhibitor, followed.logindOnBus {
                    followed.needsInhibitor = false
                    takeInhibitor(followed, on: bus)
                    continue
                }
                if followed.needsRead, followed.logindOnBus, !followed.ended {
                    followed.needsRead = false
                    do {
                        followed.lockedHint = try readLockedHint(followed.path, on: bus)
                        followed.readFailure = nil
                    } catch {
                        followed.readFailure = error
                    }
                    // The call may have queued signals: process them before waiting.
                    continue
                }
                publish(followed)
                // No deadline of its own (the wakeup ends the wait), but for an inhibitor logind
                // refused, asked for again every few seconds; not between a suspend's
                // announcement and the wake, when it was let go on purpose.
                let missingInhibitor =
                    aroundSleep != nil && followed.inhibitor == nil && followed.logindOnBus && !followed.asleep
                let outcome = try bus.wait(
                    until: .now + (missingInhibitor ? .seconds(5) : .seconds(3_600)), wakeup: wakeup.descriptor)
                if outcome == .woken { return }
                if outcome == .timedOut, missingInhibitor { followed.needsInhibitor = true }
            } catch {
                cache.fail(
                    LogindSessionLockError(
                        .connectionLost, "The connection to the bus failed: \(error)", underlying: error))
                return
            }
        }
    }

    /// Asks logind to wait for `aroundSleep` before each suspend (a delay inhibitor). Without one
    /// (logind refused, or gave no descriptor) the suspend is still seen, without the wait.
    func takeInhibitor(_ followed: FollowedSession, on bus: BusConnection) {
        followed.releaseInhibitor()
        let descriptor = try? bus.call(
            destination: Logind.service, path: Logind.managerPath, interface: Logind.managerInterface,
            member: "Inhibit",
            arguments: [
                .string("sleep"), .string("tpm-keychain"), .string("erases the keys it holds"), .string("delay"),
            ],
            read: { $0.readUnixFD() })
        followed.inhibitor = descriptor ?? nil
    }

    func publish(_ followed: FollowedSession) {
        if followed.ended {
            cache.fail(
                LogindSessionLockError(.noSession, "The session \(followed.path) has ended (logind's SessionRemoved)"))
        } else if !followed.logindOnBus {
            cache.fail(LogindSessionLockError(.logindUnavailable, "logind (\(Logind.service)) has left the bus"))
        } else if let failure = followed.readFailure {
            cache.fail(failure)
        } else {
            cache.set(
                lockedHint: followed.lockedHint, lockRequested: followed.lockRequested,
                timesLocked: followed.timesLocked, timesSuspended: followed.timesSuspended)
        }
    }

    /// The answer to Properties.Get on a session object that does not exist: sd-bus services (logind)
    /// answer UnknownObject, libdbus-based ones (a logind restarted without the session, or a mock)
    /// UnknownMethod, since no object there implements Get.
    static func sessionIsGone(_ error: BusError) -> Bool {
        switch error.name {
        case Logind.ErrorName.noSuchSession, "org.freedesktop.DBus.Error.UnknownObject",
            "org.freedesktop.DBus.Error.UnknownMethod":
            true
        default: false
        }
    }

    /// A failed call to logind, as a caller can act on it.
    static func failure(_ error: BusError, asking what: String) -> LogindSessionLockError {
        switch error.name {
        case "org.freedesktop.DBus.Error.ServiceUnknown", "org.freedesktop.DBus.Error.NameHasNoOwner":
            return LogindSessionLockError(
                .logindUnavailable, "logind (\(Logind.service)) is not on the bus (\(error))", underlying: error)
        case "org.freedesktop.DBus.Error.AccessDenied":
            return LogindSessionLockError(
                .logindUnavailable, "The bus policy does not let this process ask logind (\(error))", underlying: error)
        case "org.freedesktop.DBus.Error.NoReply", "org.freedesktop.DBus.Error.Timeout":
            return LogindSessionLockError(
                .logindUnavailable, "logind did not answer \(what) (\(error))", underlying: error)
        case nil where error.errno == ETIMEDOUT:
            return LogindSessionLockError(
                .logindUnavailable, "logind did not answer \(what) in time (\(error))", underlying: error)
        case nil:
            return LogindSessionLockError(
                .busUnavailable, "The bus failed while asking logind for \(what) (\(error))", underlying: error)
        default:
            return LogindSessionLockError(.unexpectedReply, "logind refused \(what) (\(error))", underlying: error)
        }
    }
}
