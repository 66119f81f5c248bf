// sd-bus, confined: the DBus target's files are the only ones of the package that touch
// CSystemdBus's sd_bus and sd_bus_message pointers. Every sd-bus return code goes through
// `check(_:_:)`, every error reply becomes a `BusError`, and nothing here outlives the thread that
// opened it: sd-bus connections are not thread-safe, so one connection serves one operation on one
// of FprintdAuthenticator's serial queues, one LogindSessionLock on its own thread, or the Secret
// Service daemon's loop, and only the `Wakeup` crosses threads.

internal import CSystemdBus
package import SystemCalls

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// One client connection to a message bus, used from one thread. Closed (flushed, then unreferenced)
/// on deinit, after its signal subscriptions: the peer sees the connection's unique name vanish,
/// which is how fprintd learns to release a device whose client died.
package final class BusConnection {
    let bus: OpaquePointer
    private var subscriptions: [Subscription] = []
    /// Subtrees served with ``serve(under:handler:)``, removed before the connection closes.
    var servedSubtrees: [ServedSubtree] = []

    /// Connects to `address` (a D-Bus address such as `unix:path=/run/dbus/system_bus_socket`), or
    /// when nil to the system bus (sd-bus honours `DBUS_SYSTEM_BUS_ADDRESS`), or the session bus
    /// when `sessionBus` (`DBUS_SESSION_BUS_ADDRESS`).
    ///
    /// - Parameter methodCallTimeout: how long one method call may wait for its reply.
    /// - Throws: `BusError` when the bus cannot be reached.
    package init(
        address: String?, sessionBus: Bool = false, description: String, methodCallTimeout: Duration
    ) throws(BusError) {
        var opened: OpaquePointer? = nil
        if let address {
            try Self.check("connect", tk_sd_bus_new(&opened))
            guard let created = opened else {
                throw BusError(operation: "connect", name: nil, message: "tk_sd_bus_new returned no bus", errno: ENOMEM)
            }
            do {
                try Self.check("connect", tk_sd_bus_set_address(created, address))
                try Self.check("connect", tk_sd_bus_set_bus_client(created, 1))
                try Self.check("connect", tk_sd_bus_set_description(created, description))
                try Self.check("connect", tk_sd_bus_start(created))
            } catch {
                tk_sd_bus_flush_close_unref(created)
                throw error
            }
        } else if sessionBus {
            try Self.check("connect", tk_sd_bus_open_user_with_description(&opened, description))
        } else {
            try Self.check("connect", tk_sd_bus_open_system_with_description(&opened, description))
        }
        guard let opened else {
            throw BusError(operation: "connect", name: nil, message: "sd-bus returned no bus", errno: ENOMEM)
        }
        bus = opened
        let microseconds = Self.microseconds(methodCallTimeout)
        if microseconds > 0 {
            do {
                try Self.check("connect", tk_sd_bus_set_method_call_timeout(bus, microseconds))
            } catch {
                tk_sd_bus_flush_close_unref(bus)
                throw error
            }
        }
    }

    deinit {
        for subscription in subscriptions { subscription.end() }
        for subtree in servedSubtrees { subtree.end() }
        tk_sd_bus_flush_close_unref(bus)
    }

    /// Calls `member` with string arguments and hands the reply to `read`.
    ///
    /// - Throws: `BusError` with the error reply's name, or a local failure.
    package func call<T>(
        destination: String, path: String, interface: String, member: String, arguments: [BusArgument] = [],
        read: (inout BusMessageReader) -> T = { _ in () }
    ) throws(BusError) -> T {
        var request: OpaquePointer? = nil
        try Self.check(member, tk_sd_bus_message_new_method_call(bus, &request, destination, path, interface, member))
        defer { tk_sd_bus_message_unref(request) }
        for argument in arguments {
            let result: Int32
            switch argument {
            case .string(let string):
                result = string.withCString {
                    tk_sd_bus_message_append_basic(request, CChar(bitPattern: UInt8(ascii: "s")), $0)
                }
            case .uint32(var number):
                result = tk_sd_bus_message_append_basic(request, CChar(bitPattern: UInt8(ascii: "u")), &number)
            }
            try Self.check(member, result)
        }
        var error = sd_bus_error()
        defer { tk_sd_bus_error_free(&error) }
        var reply: OpaquePointer? = nil
        let result = tk_sd_bus_call(bus, request, 0, &error, &reply)
        defer { tk_sd_bus_message_unref(reply) }
        if result < 0 {
            throw BusError(
                operation: member,
                name: error.name.map { String(cString: $0) },
                message: error.message.map { String(cString: $0) } ?? String(cString: strerror(-result)),
                errno: -result
            )
        }
        guard let reply else {
            throw BusError(operation: member, name: nil, message: "no reply message", errno: EBADMSG)
        }
        var reader = BusMessageReader(message: reply)
        return read(&reader)
    }

    /// The unique name (":1.42") of the connection that owns `name` now.
    ///
    /// - Throws: `BusError` (`org.freedesktop.DBus.Error.NameHasNoOwner` when nobody owns it).
    package func nameOwner(_ name: String) throws(BusError) -> String {
        let owner = try call(
            destination: BusDriver.name, path: BusDriver.path, interface: BusDriver.interface, member: "GetNameOwner",
            arguments: [.string(name)], read: { $0.readString() })
        guard let owner, owner.hasPrefix(":") else {
            throw BusError(
                operation: "GetNameOwner", name: nil, message: "the reply has no unique name", errno: EBADMSG)
        }
        return owner
    }

    /// Subscribes to a signal that `name` broadcasts; `handler` runs inside ``process()`` on this
    /// thread, for as long as the connection lives, for signals `sender` sent (see ``SignalSender``).
    ///
    /// - Throws: `BusError` when the bus refuses the match rule.
    package func subscribe(
        from sender: SignalSender, name: String, path: String, interface: String, member: String,
        handler: @escaping (inout BusMessageReader) -> Void
    ) throws(BusError) {
        let subscription = Subscription(sender: sender, handler: handler)
        let userdata = Unmanaged.passUnretained(subscription).toOpaque()
        var slot: OpaquePointer? = nil
        // tk_sd_bus_match_signal waits for the bus to acknowledge the match, so no signal sent after it
        // returns can be missed.
        let result = tk_sd_bus_match_signal(bus, &slot, name, path, interface, member, dispatchToSubscription, userdata)
        try Self.check("AddMatch \(interface).\(member)", result)
        subscription.slot = slot
        subscriptions.append(subscription)
    }

    /// Subscribes to the messages a full match rule selects (for keys `tk_sd_bus_match_signal` has no
    /// parameter for, such as `arg0`); `handler` runs inside ``process()`` on this thread, for as
    /// long as the connection lives, for signals `sender` sent.
    ///
    /// - Throws: `BusError` when the bus refuses the match rule.
    package func subscribe(
        rule: String, from sender: SignalSender, handler: @escaping (inout BusMessageReader) -> Void
    ) throws(BusError) {
        let subscription = Subscription(sender: sender, handler: handler)
        let userdata = Unmanaged.passUnretained(subscription).toOpaque()
        var slot: OpaquePointer? = nil
        // Like tk_sd_bus_match_signal, tk_sd_bus_add_match waits for the bus to acknowledge the match.
        let result = tk_sd_bus_add_match(bus, &slot, rule, dispatchToSubscription, userdata)
        try Self.check("AddMatch \(rule)", result)
        subscription.slot = slot
        subscriptions.append(subscription)
    }

    /// Processes one pending message, dispatching it to subscriptions.
    ///
    /// - Returns: true when something was processed (call again), false when nothing is pending.
    /// - Throws: `BusError` when the connection failed (the bus or the peer went away).
    package func process() throws(BusError) -> Bool {
        let result = tk_sd_bus_process(bus, nil)
        try Self.check("process", result)
        return result > 0
    }

    /// Waits until the connection needs processing, `wakeup` becomes readable, or `deadline`.
    ///
    /// - Throws: `BusError` when the connection is unusable, or as `poll` fails.
    package func wait(until deadline: ContinuousClock.Instant, wakeup: Int32) throws(BusError) -> BusWaitOutcome {
        let descriptor = tk_sd_bus_get_fd(bus)
        try Self.check("poll", descriptor)
        let events = tk_sd_bus_get_events(bus)
        try Self.check("poll", events)
        var busTimeout: UInt64 = 0
        try Self.check("poll", tk_sd_bus_get_timeout(bus, &busTimeout))

        let remaining = deadline - ContinuousClock.now
        guard remaining > .zero else { return .timedOut }
        var milliseconds = Self.milliseconds(remaining)
        if busTimeout != UInt64.max {
            // sd-bus's timeout is absolute, on CLOCK_MONOTONIC.
            var now = timespec()
            clock_gettime(CLOCK_MONOTONIC, &now)
            let nowMicroseconds = UInt64(now.tv_sec) * 1_000_000 + UInt64(now.tv_nsec) / 1_000
            let busMilliseconds = busTimeout > nowMicroseconds ? (busTimeout - nowMicroseconds + 999) / 1_000 : 0
            milliseconds = min(milliseconds, Int32(clamping: busMilliseconds))
        }
        var descriptors = [
            pollfd(fd: descriptor, events: Int16(truncatingIfNeeded: events), revents: 0),
            pollfd(fd: wakeup, events: Int16(POLLIN), revents: 0),
        ]
        let timeout = milliseconds
        let ready: Int32
        do {
            ready = try retryingInterrupts {
                descriptors.withUnsafeMutableBufferPointer { poll($0.baseAddress, 2, timeout) }
            }
        } catch {
            throw BusError(operation: "poll", name: nil, message: error.description, errno: error.rawValue)
        }
        if descriptors[1].revents != 0 { return .woken }
        if ready == 0 && ContinuousClock.now >= deadline { return .timedOut }
        return .ready
    }

    /// Turns an sd-bus return code (negative errno on failure) into a `BusError`.
    static func check(_ operation: String, _ result: Int32) throws(BusError) {
        guard result < 0 else { return }
        // libsystemd is loaded on first use: without it every call fails with ENOSYS, which says why.
        let message =
            result == -ENOSYS ? tk_sd_bus_load_error().map { String(cString: $0) } : nil
        throw BusError(
            operation: operation, name: nil, message: message ?? String(cString: strerror(-result)), errno: -result)
    }

    private static func microseconds(_ duration: Duration) -> UInt64 {
        let (seconds, attoseconds) = duration.components
        guard seconds >= 0 else { return 0 }
        return UInt64(seconds) * 1_000_000 + UInt64(attoseconds / 1_000_000_000_000)
    }

    private static func milliseconds(_ duration: Duration) -> Int32 {
        let (seconds, attoseconds) = duration.components
        guard seconds >= 0 else { return 0 }
        // Round up, so a wait never ends just before the deadline and spins.
        let total = seconds * 1_000 + (attoseconds + 999_999_999_999_999) / 1_000_000_000_000_000
        return Int32(clamping: total)
    }
}

/// The bus driver's names: its messages carry the sender `org.freedesktop.DBus`, which dbus-daemon
/// never lets a client use.
package enum BusDriver {
    package static let name = "org.freedesktop.DBus"
    package static let path = "/org/freedesktop/DBus"
    package static let interface = "org.freedesktop.DBus"

    /// NameOwnerChanged about `name` only, not every client coming and going on the bus.
    package static func ownerChangedRule(for name: String) -> String {
        "type='signal',sender='\(Self.name)',path='\(path)',interface='\(interface)',member='NameOwnerChanged',arg0='\(name)'"
    }
}

/// Whose signals a subscription accepts. A match on a well-known sender name does not say: dbus-daemon
/// applies match rules only to broadcasts and delivers a unicast signal from anyone who may send
/// signals (every user, under the system bus's default policy), and sd-bus lets every unique-name
/// sender through such a match, since it cannot know which names the sender owns. So a
/// subscription accepts only broadcasts (no destination) whose sender, which dbus-daemon sets and
/// no client can choose, is exactly ``uniqueName``.
///
/// Used on the connection's thread only; who tracks the owner (a NameOwnerChanged handler) updates
/// ``uniqueName`` there.
package final class SignalSender {
    /// The unique name (":1.42") whose signals are accepted, or ``BusDriver/name``; nil accepts none.
    package var uniqueName: String?

    /// Also accept signals sent to this connection alone: only for the bus driver, whose name no
    /// client can take, for NameLost and NameAcquired.
    package var acceptsUnicast = false

    package init(_ uniqueName: String?) { self.uniqueName = uniqueName }

    /// The bus driver, for NameOwnerChanged.
    package static var busDriver: SignalSender { SignalSender(BusDriver.name) }

    fileprivate func accepts(_ message: OpaquePointer) -> Bool {
        guard let uniqueName, acceptsUnicast || tk_sd_bus_message_get_destination(message) == nil,
            let sender = tk_sd_bus_message_get_sender(message)
        else { return false }
        return String(cString: sender) == uniqueName
    }
}

/// sd-bus's callback for every match: `userdata` is the match's `Subscription`, which the connection
/// keeps alive for as long as the match is installed.
private func dispatchToSubscription(
    _ message: OpaquePointer?, _ userdata: UnsafeMutableRawPointer?, _ error: UnsafeMutablePointer<sd_bus_error>?
) -> Int32 {
    guard let message, let userdata else { return 0 }
    let subscription = Unmanaged<Subscription>.fromOpaque(userdata).takeUnretainedValue()
    guard subscription.sender.accepts(message) else { return 0 }
    var reader = BusMessageReader(message: message)
    subscription.handler(&reader)
    return 0
}

/// A signal match: whose signals it accepts, the handler, and the sd-bus slot that keeps the match installed.
private final class Subscription {
    let sender: SignalSender
    let handler: (inout BusMessageReader) -> Void
    var slot: OpaquePointer?

    init(sender: SignalSender, handler: @escaping (inout BusMessageReader) -> Void) {
        self.sender = sender
        self.handler = handler
    }

    /// Removes the match. Called before the connection closes, while the bus is still alive.
    func end() {
        if let slot { tk_sd_bus_slot_unref(slot) }
        slot = nil
    }
}

/// An eventfd another thread writes to, so a thread waiting in ``BusConnection/wait(until:wakeup:)``
/// returns at once. It stays readable once signalled (it is never read), which is what a
/// cancellation wants.
package final class Wakeup: Sendable {
    package let descriptor: Int32

    /// - Throws: `Errno` when no eventfd can be made (descriptor limit).
    package init() throws(Errno) {
        descriptor = try retryingInterrupts { eventfd(0, Int32(EFD_CLOEXEC | EFD_NONBLOCK)) }
    }

    deinit { closeDescriptor(descriptor) }

    /// Makes it not readable again (reads the counter), for a wake-up that is used more than once.
    package func drain() {
        var count: UInt64 = 0
        _ = withUnsafeMutableBytes(of: &count) { read(descriptor, $0.baseAddress, $0.count) }
    }

    /// Makes the descriptor readable. Writing to an eventfd that is not full cannot fail.
    package func signal() {
        var one: UInt64 = 1
        _ = withUnsafeBytes(of: &one) { write(descriptor, $0.baseAddress, $0.count) }
    }
}
