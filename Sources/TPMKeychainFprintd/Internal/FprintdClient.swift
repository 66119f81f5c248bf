// fprintd's D-Bus protocol, step by step, on one blocking connection. Runs on the authenticator's
// own queues (never on Swift concurrency's cooperative threads). The interface is fprintd's
// src/manager.xml and src/device.xml; see docs in FprintdAuthenticator.swift for what each step
// means to a caller.

import Crypto
import DBus
import SystemCalls
import TPMKeychain

/// fprintd's names on the bus.
enum Fprintd {
    static let service = "net.reactivated.Fprint"
    static let managerPath = "/net/reactivated/Fprint/Manager"
    static let managerInterface = "net.reactivated.Fprint.Manager"
    static let deviceInterface = "net.reactivated.Fprint.Device"

    /// fprintd's error names (src/fprintd.h, `FPRINT_ERROR_*`).
    enum ErrorName {
        static let noSuchDevice = "net.reactivated.Fprint.Error.NoSuchDevice"
        static let noEnrolledPrints = "net.reactivated.Fprint.Error.NoEnrolledPrints"
        static let permissionDenied = "net.reactivated.Fprint.Error.PermissionDenied"
        static let alreadyInUse = "net.reactivated.Fprint.Error.AlreadyInUse"
    }

    /// The polkit action fprintd checks before letting a user list or verify their own prints.
    static let verifyAction = "net.reactivated.fprint.device.verify"

    /// The domain tag hashed ahead of the device and finger names, so this identifier cannot be
    /// mistaken for any other hash of the same strings.
    static let enrollmentTag = "TPMKeychainFprintd.enrollment.v1"
    /// The tag ahead of the device, the finger names and the enrollment helper's print hash.
    static let printsTag = "TPMKeychainFprintd.enrollment.prints.v1"
}

/// A verification's cancellation flag plus the wake-up that interrupts its wait.
final class VerificationCancellation: Sendable {
    private let cancelled = Locked(false)
    let wakeup: Wakeup

    init(wakeup: Wakeup) { self.wakeup = wakeup }

    var isCancelled: Bool { cancelled.withLock { $0 } }

    func cancel() {
        cancelled.withLock { $0 = true }
        wakeup.signal()
    }
}

/// One operation against fprintd over one connection.
struct FprintdClient {
    let busAddress: String?
    let methodCallTimeout: Duration
    /// The enrollment helper's socket.
    var helperSocket = EnrollmentHelperClient.defaultSocket

    /// GetDefaultDevice, then ListEnrolledFingers("") (the caller's own prints).
    func enrollment() throws(AuthenticationError) -> Enrollment? {
        let bus = try connect()
        let device = try defaultDevice(on: bus)
        let fingers: [String]
        do {
            fingers =
                try bus.call(
                    destination: Fprintd.service, path: device, interface: Fprintd.deviceInterface,
                    member: "ListEnrolledFingers", arguments: [""], read: { $0.readStringArray() }
                ) ?? []
        } catch {
            if error.name == Fprintd.ErrorName.noEnrolledPrints { return nil }
            throw AuthenticationError(error)
        }
        guard !fingers.isEmpty else { return nil }
        let names = Self.identifier(device: device, fingers: fingers)
        switch try EnrollmentHelperClient(socketPath: helperSocket).ask() {
        case .notInstalled:
            return Enrollment(biometryType: .touchID, identifier: names)
        case .noPrints:
            // fprintd lists fingers whose files the helper does not find: another state directory.
            throw AuthenticationError(
                .biometryNotAvailable,
                "fprintd lists enrolled fingers, but the enrollment helper finds no print of this user (is fprintd's state directory the helper's --prints?)"
            )
        case .prints(let prints):
            return Enrollment(
                biometryType: .touchID, identifier: Self.identifier(device: device, fingers: fingers, prints: prints),
                superseding: names)
        }
    }

    /// As ``identifier(device:fingers:)``, with the enrollment helper's hash of the print files
    /// after the names: it changes when a finger is enrolled again, even under the same name.
    static func identifier(device: String, fingers: [String], prints: [UInt8]) -> [UInt8] {
        var hash = SHA256()
        for field in [Fprintd.printsTag, device] + fingers.sorted() {
            hash.update(data: Array(field.utf8) + [0])
        }
        hash.update(data: prints)
        return Array(hash.finalize())
    }

    /// SHA-256 over the tag, the device's object path and the sorted finger names, each ended by
    /// NUL (which no D-Bus string contains, so no two inputs hash the same bytes).
    static func identifier(device: String, fingers: [String]) -> [UInt8] {
        var hash = SHA256()
        for field in [Fprintd.enrollmentTag, device] + fingers.sorted() {
            hash.update(data: Array(field.utf8) + [0])
        }
        return Array(hash.finalize())
    }

    /// Claim(""), match VerifyStatus, VerifyStart("any"), wait for a final status, then VerifyStop
    /// and Release whatever happened after the claim. Every call goes to the process that owned
    /// fprintd's name when the verification began, and only that process's broadcasts count (see
    /// ``SignalSender``); if the name changes owner meanwhile, the verification fails.
    ///
    /// A cancellation is seen between steps and at once while waiting for a status; a method call
    /// already sent (Claim, VerifyStart) is let finish first, bounded by the method call timeout.
    func verify(cancellation: VerificationCancellation, timeout: Duration) throws(AuthenticationError) {
        guard !cancellation.isCancelled else { throw Self.cancelled }
        let bus = try connect()
        let statuses = StatusQueue()
        do {
            // Watching the name before anything else: any owner change from here on is seen.
            try bus.subscribe(rule: BusDriver.ownerChangedRule(for: Fprintd.service), from: .busDriver) { message in
                guard message.readString() == Fprintd.service, message.readString() != nil,
                    let owner = message.readString()
                else { return }
                statuses.lastOwner = owner
            }
        } catch {
            throw AuthenticationError(error)
        }
        // Through the well-known name, which starts fprintd when it is bus-activated; then its owner.
        let device = try defaultDevice(on: bus)
        let fprintd: String
        do {
            fprintd = try bus.nameOwner(Fprintd.service)
        } catch {
            throw AuthenticationError(error)
        }
        statuses.fprintd = fprintd
        do {
            try bus.call(
                destination: fprintd, path: device, interface: Fprintd.deviceInterface, member: "Claim", arguments: [""]
            )
        } catch {
            throw AuthenticationError(error)
        }
        let outcome: Result<Void, AuthenticationError>
        var started = false
        do throws(AuthenticationError) {
            try runVerification(
                on: bus, fprintd: fprintd, device: device, statuses: statuses, cancellation: cancellation,
                timeout: timeout, started: &started)
            outcome = .success(())
        } catch {
            outcome = .failure(error)
        }
        // Cleanup failures do not change the outcome: a match stays a match, and when the bus or
        // fprintd is gone, fprintd drops the claim as our connection's name vanishes anyway.
        if started {
            _ = try? bus.call(
                destination: fprintd, path: device, interface: Fprintd.deviceInterface, member: "VerifyStop")
        }
        _ = try? bus.call(destination: fprintd, path: device, interface: Fprintd.deviceInterface, member: "Release")
        try outcome.get()
    }

    private func runVerification(
        on bus: BusConnection, fprintd: String, device: String, statuses: StatusQueue,
        cancellation: VerificationCancellation,
        timeout: Duration, started: inout Bool
    ) throws(AuthenticationError) {
        do {
            try bus.subscribe(
                from: SignalSender(fprintd), name: Fprintd.service, path: device, interface: Fprintd.deviceInterface,
                member: "VerifyStatus"
            ) { message in
                guard let result = message.readString(), let done = message.readBool() else { return }
                statuses.received.append((result, done))
            }
        } catch {
            throw AuthenticationError(error)
        }
        guard !cancellation.isCancelled else { throw Self.cancelled }
        do {
            try bus.call(
                destination: fprintd, path: device, interface: Fprintd.deviceInterface, member: "VerifyStart",
                arguments: ["any"])
        } catch {
            throw AuthenticationError(error)
        }
        started = true

        let deadline = ContinuousClock.now + timeout
        while true {
            guard !cancellation.isCancelled else { throw Self.cancelled }
            do {
                while try bus.process() {
                    if statuses.received.contains(where: { $0.done }) || statuses.ownerChanged { break }
                }
            } catch {
                throw AuthenticationError(
                    .biometryNotAvailable, "The connection to fprintd failed during verification: \(error)")
            }
            // Statuses with done == false (verify-retry-scan, verify-swipe-too-short, ...) ask for
            // another touch: keep waiting for the final one. A final status came from the reader
            // we claimed, whatever happened to fprintd after it.
            if let final = statuses.received.first(where: { $0.done }) {
                try Self.conclude(final.result)
                return
            }
            guard !statuses.ownerChanged else {
                throw AuthenticationError(
                    .biometryNotAvailable, "fprintd left the bus or was replaced during the verification")
            }
            let waited: BusWaitOutcome
            do {
                waited = try bus.wait(until: deadline, wakeup: cancellation.wakeup.descriptor)
            } catch {
                throw AuthenticationError(
                    .biometryNotAvailable, "The connection to fprintd failed during verification: \(error)")
            }
            switch waited {
            case .ready: continue
            case .woken: throw Self.cancelled
            case .timedOut:
                throw AuthenticationError(
                    .systemCancel, "No finger was recognised within \(timeout): the verification timed out")
            }
        }
    }

    /// The final VerifyStatus result.
    private static func conclude(_ result: String) throws(AuthenticationError) {
        switch result {
        case "verify-match":
            return
        case "verify-no-match":
            throw AuthenticationError(.authenticationFailed, "The fingerprint did not match")
        case "verify-disconnected":
            throw AuthenticationError(
                .biometryNotAvailable, "The fingerprint reader was disconnected (verify-disconnected)")
        case "verify-unknown-error":
            throw AuthenticationError(.biometryNotAvailable, "The fingerprint reader failed (verify-unknown-error)")
        default:
            // A retry result that fprintd ended the verification on, or a result this version does
            // not know: not a match, so it fails closed.
            throw AuthenticationError(
                .authenticationFailed, "fprintd ended the verification without a match (\(result))")
        }
    }

    private static let cancelled = AuthenticationError(.appCancel, "The verification was cancelled")

    private func connect() throws(AuthenticationError) -> BusConnection {
        do {
            return try BusConnection(
                address: busAddress, description: "tpm-keychain-fprintd", methodCallTimeout: methodCallTimeout)
        } catch {
            throw AuthenticationError(.biometryNotAvailable, "The system bus cannot be reached: \(error)")
        }
    }

    private func defaultDevice(on bus: BusConnection) throws(AuthenticationError) -> String {
        let device: String?
        do {
            device = try bus.call(
                destination: Fprintd.service, path: Fprintd.managerPath, interface: Fprintd.managerInterface,
                member: "GetDefaultDevice", read: { $0.readString("o") }
            )
        } catch {
            throw AuthenticationError(error)
        }
        guard let device else {
            throw AuthenticationError(.biometryNotAvailable, "fprintd's GetDefaultDevice reply has no object path")
        }
        return device
    }
}

/// The VerifyStatus signals seen so far, and fprintd's owner; touched only by the thread running
/// the verification.
private final class StatusQueue {
    var received: [(result: String, done: Bool)] = []
    /// The unique name the verification talks to.
    var fprintd: String?
    /// The owner the last NameOwnerChanged about fprintd's name named ("" for none).
    var lastOwner: String?

    /// Whether fprintd's name left the process the verification talks to.
    var ownerChanged: Bool { lastOwner.map { $0 != fprintd } ?? false }
}

extension AuthenticationError {
    /// An error reply from fprintd (or the bus), as a caller can act on it.
    init(_ error: BusError) {
        switch error.name {
        case Fprintd.ErrorName.noSuchDevice:
            self.init(.biometryNotAvailable, "fprintd has no fingerprint reader (\(error))")
        case Fprintd.ErrorName.noEnrolledPrints:
            self.init(.biometryNotEnrolled, "No fingerprint is enrolled for this user (\(error))")
        case Fprintd.ErrorName.permissionDenied:
            self.init(
                .biometryNotAvailable,
                "polkit did not authorize \(Fprintd.verifyAction) for this user, so fprintd refused (\(error))")
        case Fprintd.ErrorName.alreadyInUse:
            self.init(.biometryNotAvailable, "The fingerprint reader is claimed by another client (\(error))")
        case "org.freedesktop.DBus.Error.ServiceUnknown", "org.freedesktop.DBus.Error.NameHasNoOwner":
            self.init(.biometryNotAvailable, "fprintd is not running and cannot be started (\(error))")
        case nil:
            self.init(.biometryNotAvailable, "The bus failed while talking to fprintd (\(error))")
        default:
            self.init(.biometryNotAvailable, "fprintd refused (\(error))")
        }
    }
}
