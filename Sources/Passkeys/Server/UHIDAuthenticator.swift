package import SystemCalls
import TPMKeychain

#if canImport(Glibc)
import Glibc
#endif

/// The authenticator as a HID device through the kernel's UHID (`/dev/uhid`): the kernel makes
/// a /dev/hidrawN with the FIDO report descriptor, which browsers and libfido2 find as a
/// security key, and passes its output reports here as events; the answers go back as input
/// reports. A HID node tells nothing of who writes to it: who may use the device is what its
/// node's permissions say (udev gives FIDO devices to the user at the seat), and every request
/// is decided for an unknown program of this user.
package final class UHIDAuthenticator: Sendable {
    private let descriptor: Int32
    private let authenticator: PasskeyAuthenticator
    private let stopped = Locked(false)

    /// The vendor and product the device reports; 0 for both would be refused by some hosts.
    static let vendor: UInt32 = 0x1209 // pid.codes, for open projects
    static let product: UInt32 = 0x7D4B

    /// Opens `path` (the kernel's /dev/uhid) and creates the device.
    ///
    /// - Throws: `Errno` when the node cannot be opened (ENOENT: this kernel has no UHID) or the
    ///   device cannot be made.
    package convenience init(path: String = "/dev/uhid", authenticator: PasskeyAuthenticator) throws(Errno) {
        let descriptor = open(path, O_RDWR | O_CLOEXEC)
        guard descriptor >= 0 else { throw Errno.current }
        try self.init(descriptor: descriptor, authenticator: authenticator)
    }

    /// Creates the device on `descriptor`, an open /dev/uhid (or, in tests, the kernel's side
    /// played by a peer), which the authenticator then owns.
    package init(descriptor: Int32, authenticator: PasskeyAuthenticator) throws(Errno) {
        self.descriptor = descriptor
        self.authenticator = authenticator
        let create = UHIDEvents.create(
            name: "TPMKeychain passkeys", vendor: Self.vendor, product: Self.product)
        let written = create.withUnsafeBytes { write(descriptor, $0.baseAddress, $0.count) }
        guard written == create.count else {
            let error = written < 0 ? Errno.current : Errno(rawValue: EIO)
            close(descriptor)
            throw error
        }
    }

    /// Answers the host until ``stop()`` or until the device goes away; the device is destroyed
    /// when its descriptor closes.
    package func serve() {
        defer { close(descriptor) }
        let requester = PasskeyAuthenticator.Requester(
            caller: AccessCaller(face: .authenticator, uid: getuid(), source: .peerCredentials, executable: nil),
            description: "a program using the passkey device (/dev/hidraw)")
        var transport = UHIDReports(descriptor: descriptor, stopped: stopped)
        CTAPHIDSession.run(&transport, authenticator: authenticator, requester: requester)
    }

    /// Ends ``serve()`` within its next wait.
    package func stop() {
        stopped.withLock { $0 = true }
    }
}

/// Reports carried by UHID events: output events in, input events out; feature reports refused.
private struct UHIDReports: CTAPHIDTransport {
    let descriptor: Int32
    let stopped: Locked<Bool>
    /// How often a wait looks at ``UHIDAuthenticator/stop()``.
    static let stopCheck: Int32 = 500

    mutating func send(_ reports: [[UInt8]]) -> Bool {
        for report in reports {
            let event = UHIDEvents.input(report)
            guard writeEvent(event) else { return false }
        }
        return true
    }

    mutating func readReport(timeout: Int32) -> CTAPHIDReadOutcome {
        var waited: Int32 = 0
        var event = [UInt8](repeating: 0, count: UHIDEvents.size)
        while !stopped.withLock({ $0 }) {
            var poller = pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0)
            let slice = timeout < 0 ? Self.stopCheck : min(Self.stopCheck, timeout - waited)
            let ready = poll(&poller, 1, slice)
            if ready < 0, errno == EINTR { continue }
            if ready == 0 {
                waited += slice
                if timeout >= 0, waited >= timeout { return .timedOut }
                continue
            }
            guard ready > 0 else { return .closed }
            let count = event.withUnsafeMutableBytes { read(descriptor, $0.baseAddress, $0.count) }
            if count < 0, errno == EINTR || errno == EAGAIN { continue }
            guard count > 0 else { return .closed }
            switch UHIDEvents.parse(Array(event[0..<count])) {
            case .output(let report) where report.count == CTAPHIDChannels.reportSize: return .report(report)
            case .getReport(let id):
                guard writeEvent(UHIDEvents.refusal(.getReportReply, id: id)) else { return .closed }
            case .setReport(let id):
                guard writeEvent(UHIDEvents.refusal(.setReportReply, id: id)) else { return .closed }
            default: continue
            }
        }
        return .closed
    }

    private func writeEvent(_ event: [UInt8]) -> Bool {
        while true {
            let written = event.withUnsafeBytes { write(descriptor, $0.baseAddress, $0.count) }
            if written < 0, errno == EINTR { continue }
            return written == event.count
        }
    }
}
