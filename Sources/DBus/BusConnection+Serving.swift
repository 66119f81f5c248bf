// The server side of a BusConnection: owning a name, answering method calls under an object path,
// sending signals, and telling who a caller is. Part of the confinement BusConnection.swift describes.

internal import CSystemdBus
import SystemCalls

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// One method call a served subtree received, its arguments read. Valid on the connection's thread.
package struct BusMethodCall {
    /// The caller's unique name (":1.42"), set by the bus daemon.
    package let sender: String
    package let path: String
    /// Empty when the caller named none (D-Bus allows that; the member then decides).
    package let interface: String
    package let member: String
    /// The arguments' signature.
    package let signature: String
    package let arguments: [BusValue]
}

/// A served method's answer.
package enum BusReply {
    /// A method return carrying these values (the method's out arguments, in order).
    case values([BusValue])
    /// An error reply: a D-Bus error name (`org.freedesktop.Secret.Error.IsLocked`) and a message.
    case error(name: String, message: String)
}

/// Who is at the other end of a unique name, as the bus daemon saw the connection made.
package struct BusPeer: Sendable, Hashable {
    /// The unique name (":1.42").
    package let sender: String
    package let uid: UInt32
    package let pid: Int32
    /// The process's executable, read from /proc when asked (nil when it could not be read).
    package let executable: String?

    package init(sender: String, uid: UInt32, pid: Int32, executable: String?) {
        self.sender = sender
        self.uid = uid
        self.pid = pid
        self.executable = executable
    }
}

/// What asking for a well-known name ended with.
package enum NameRequestOutcome: Equatable {
    case acquired
    /// Someone else owns it and did not allow replacement (or replacement was not asked).
    case ownedByAnother
}

extension BusConnection {
    /// Asks the bus for `name`, allowing a later `replacing` request of another process to take it.
    ///
    /// - Parameter replacing: take the name from its owner, if the owner allowed replacement.
    /// - Throws: `BusError` for anything but "owned by another".
    package func requestName(_ name: String, replacing: Bool) throws(BusError) -> NameRequestOutcome {
        // SD_BUS_NAME_ALLOW_REPLACEMENT (1 << 1), plus SD_BUS_NAME_REPLACE_EXISTING (1 << 0).
        let flags: UInt64 = (1 << 1) | (replacing ? 1 : 0)
        let result = tk_sd_bus_request_name(bus, name, flags)
        if result == -EEXIST { return .ownedByAnother }
        if result == -EALREADY { return .acquired }
        try Self.check("RequestName \(name)", result)
        return .acquired
    }

    /// Answers every method call to `prefix` and the paths below it with `handler`, on this
    /// connection's thread, inside ``process()``. Calls whose arguments cannot be read get
    /// `org.freedesktop.DBus.Error.InvalidArgs` without reaching the handler.
    ///
    /// - Throws: `BusError` when sd-bus refuses the subtree.
    package func serve(under prefix: String, handler: @escaping (BusMethodCall) -> BusReply) throws(BusError) {
        let subtree = ServedSubtree(connection: self, handler: handler)
        var slot: OpaquePointer? = nil
        let userdata = Unmanaged.passUnretained(subtree).toOpaque()
        try Self.check("serve \(prefix)", tk_sd_bus_add_fallback(bus, &slot, prefix, dispatchToSubtree, userdata))
        subtree.slot = slot
        servedSubtrees.append(subtree)
    }

    /// Broadcasts a signal.
    ///
    /// - Throws: `BusError` when the signal cannot be built or queued.
    package func emit(path: String, interface: String, member: String, values: [BusValue]) throws(BusError) {
        var signal: OpaquePointer? = nil
        try Self.check(member, tk_sd_bus_message_new_signal(bus, &signal, path, interface, member))
        defer { tk_sd_bus_message_unref(signal) }
        guard let signal else { return }
        try append(values, to: signal)
        try Self.check(member, tk_sd_bus_send(bus, signal, nil))
    }

    /// Calls a method with arguments of any type and returns the reply's values: the client side
    /// of another provider (an import reads gnome-keyring's items this way).
    ///
    /// - Throws: `BusError` with the error reply's name, or a local failure.
    package func call(
        destination: String, path: String, interface: String, member: String, values: [BusValue],
        timeout: Duration? = nil
    ) throws(BusError) -> [BusValue] {
        var request: OpaquePointer? = nil
        try Self.check(member, tk_sd_bus_message_new_method_call(bus, &request, destination, path, interface, member))
        defer { tk_sd_bus_message_unref(request) }
        guard let request else { throw BusError(operation: member, name: nil, message: "no message", errno: ENOMEM) }
        try append(values, to: request)
        var error = sd_bus_error()
        defer { tk_sd_bus_error_free(&error) }
        var reply: OpaquePointer? = nil
        let microseconds: UInt64 = timeout.map { UInt64($0.components.seconds) * 1_000_000 } ?? 0
        let result = tk_sd_bus_call(bus, request, microseconds, &error, &reply)
        defer { tk_sd_bus_message_unref(reply) }
        if result < 0 {
            throw BusError(
                operation: member, name: error.name.map { String(cString: $0) },
                message: error.message.map { String(cString: $0) } ?? String(cString: strerror(-result)), errno: -result
            )
        }
        guard let reply else { throw BusError(operation: member, name: nil, message: "no reply", errno: EBADMSG) }
        return try readArguments(reply)
    }

    /// Runs `action` (a call to Prompt), then waits for one signal `member` of `interface` from
    /// `path` (the Prompt's Completed) sent by `sender`, processing the connection meanwhile; its
    /// values, or nil at `deadline`. The match is in place before `action`, so the signal cannot
    /// be missed.
    ///
    /// - Throws: `BusError` when the connection fails, or what `action` throws.
    package func waitForSignal(
        from sender: String, path: String, interface: String, member: String, until deadline: ContinuousClock.Instant,
        wakeup: Int32, after action: () throws(BusError) -> Void
    ) throws(BusError) -> [BusValue]? {
        let received = ReceivedSignal()
        let userdata = Unmanaged.passUnretained(received).toOpaque()
        var slot: OpaquePointer? = nil
        try Self.check(
            "AddMatch \(member)",
            tk_sd_bus_match_signal(bus, &slot, sender, path, interface, member, storeSignal, userdata))
        defer { tk_sd_bus_slot_unref(slot) }
        try action()
        while received.values == nil {
            if try process() { continue }
            if try wait(until: deadline, wakeup: wakeup) == .timedOut { return nil }
        }
        return received.values
    }

    /// Who owns the unique name `sender`: the uid and pid the bus daemon took from the socket when
    /// the peer connected, and the executable /proc gives for that pid now.
    ///
    /// - Throws: `BusError` when the bus does not know the name (the peer left).
    package func peer(_ sender: String) throws(BusError) -> BusPeer {
        // SD_BUS_CREDS_PID (1 << 0), _UID (1 << 3), _EUID (1 << 4), _EXE (1 << 14), _AUGMENT (1 << 63).
        let mask: UInt64 = (1 << 0) | (1 << 3) | (1 << 4) | (1 << 14) | (1 << 63)
        var credentials: OpaquePointer? = nil
        try Self.check("GetConnectionCredentials", tk_sd_bus_get_name_creds(bus, sender, mask, &credentials))
        defer { tk_sd_bus_creds_unref(credentials) }
        var uid: uid_t = 0
        if tk_sd_bus_creds_get_uid(credentials, &uid) < 0 {
            try Self.check("GetConnectionCredentials", tk_sd_bus_creds_get_euid(credentials, &uid))
        }
        var pid: pid_t = 0
        try Self.check("GetConnectionCredentials", tk_sd_bus_creds_get_pid(credentials, &pid))
        var executable: UnsafePointer<CChar>? = nil
        let path = tk_sd_bus_creds_get_exe(credentials, &executable) >= 0 ? executable.map { String(cString: $0) } : nil
        return BusPeer(sender: sender, uid: uid, pid: pid, executable: path)
    }
}

/// A subtree served with ``BusConnection/serve(under:handler:)``; the connection keeps it alive
/// and removes it before closing.
final class ServedSubtree {
    unowned let connection: BusConnection
    let handler: (BusMethodCall) -> BusReply
    var slot: OpaquePointer?

    init(connection: BusConnection, handler: @escaping (BusMethodCall) -> BusReply) {
        self.connection = connection
        self.handler = handler
    }

    func end() {
        if let slot { tk_sd_bus_slot_unref(slot) }
        slot = nil
    }

    /// Reads the call, runs the handler, sends its reply. Returns 1: the call was answered.
    func answer(_ message: OpaquePointer) -> Int32 {
        let reply: BusReply
        do {
            let call = BusMethodCall(
                sender: tk_sd_bus_message_get_sender(message).map { String(cString: $0) } ?? "",
                path: tk_sd_bus_message_get_path(message).map { String(cString: $0) } ?? "",
                interface: tk_sd_bus_message_get_interface(message).map { String(cString: $0) } ?? "",
                member: tk_sd_bus_message_get_member(message).map { String(cString: $0) } ?? "",
                signature: tk_sd_bus_message_get_signature(message, 1).map { String(cString: $0) } ?? "",
                arguments: try readArguments(message))
            reply = handler(call)
        } catch {
            reply = .error(name: error.name ?? "org.freedesktop.DBus.Error.InvalidArgs", message: error.message)
        }
        switch reply {
        case .values(let values):
            var answer: OpaquePointer? = nil
            guard tk_sd_bus_message_new_method_return(message, &answer) >= 0, let answer else { return 1 }
            defer { tk_sd_bus_message_unref(answer) }
            do {
                try append(values, to: answer)
            } catch {
                // A reply the handler built wrong (an invalid object path): the caller still gets an answer.
                return sendError(
                    to: message, name: "org.freedesktop.DBus.Error.Failed", message: "The reply could not be built")
            }
            _ = tk_sd_bus_send(connection.bus, answer, nil)
            return 1
        case .error(let name, let text):
            return sendError(to: message, name: name, message: text)
        }
    }

    private func sendError(to message: OpaquePointer, name: String, message text: String) -> Int32 {
        var error = sd_bus_error()
        defer { tk_sd_bus_error_free(&error) }
        _ = tk_sd_bus_error_set(&error, name, text)
        _ = tk_sd_bus_reply_method_error(message, &error)
        return 1
    }
}

/// sd-bus's callback for a served subtree: `userdata` is the `ServedSubtree`.
private func dispatchToSubtree(
    _ message: OpaquePointer?, _ userdata: UnsafeMutableRawPointer?, _ error: UnsafeMutablePointer<sd_bus_error>?
) -> Int32 {
    guard let message, let userdata, tk_sd_bus_message_is_method_call(message, nil, nil) > 0 else { return 0 }
    return Unmanaged<ServedSubtree>.fromOpaque(userdata).takeUnretainedValue().answer(message)
}

/// Where ``BusConnection/waitForSignal(from:path:interface:member:until:wakeup:after:)`` puts what it got.
private final class ReceivedSignal {
    var values: [BusValue]?
}

private func storeSignal(
    _ message: OpaquePointer?, _ userdata: UnsafeMutableRawPointer?, _ error: UnsafeMutablePointer<sd_bus_error>?
) -> Int32 {
    guard let message, let userdata else { return 0 }
    let received = Unmanaged<ReceivedSignal>.fromOpaque(userdata).takeUnretainedValue()
    received.values = (try? readArguments(message)) ?? []
    return 0
}
