// Errors, arguments and message reading for BusConnection: the sd_bus_message side of the
// confinement that BusConnection.swift describes (this file and that one are the only ones that
// touch CSystemdBus's pointers).

internal import CSystemdBus
import SystemCalls

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// A failure on the bus: an error reply (a D-Bus error name such as
/// `net.reactivated.Fprint.Error.NoEnrolledPrints`) or a local failure of sd-bus (an errno).
package struct BusError: Error, Sendable, CustomStringConvertible {
    /// What was being done: "connect", or the method called ("Claim").
    package let operation: String
    /// The D-Bus error name of an error reply; nil for a local failure (no bus, connection reset).
    package let name: String?
    /// The error reply's message, or strerror's text for a local failure.
    package let message: String
    /// The errno sd-bus reported (positive); for an error reply, the one sd-bus maps its name to.
    package let errno: Int32

    package init(operation: String, name: String?, message: String, errno: Int32) {
        self.operation = operation
        self.name = name
        self.message = message
        self.errno = errno
    }

    package var description: String {
        if let name { return "\(operation): \(name): \(message)" }
        return "\(operation): \(message) (errno \(errno))"
    }
}

/// What a wait on the connection ended with.
package enum BusWaitOutcome {
    /// The connection has something to process (or sd-bus asked to be called again).
    case ready
    /// The wake-up descriptor became readable: someone cancelled.
    case woken
    /// The deadline passed.
    case timedOut
}

/// One argument of a method call: a string ("s") or an unsigned 32-bit integer ("u", a PID or UID).
/// A string literal is a string argument.
package enum BusArgument: ExpressibleByStringLiteral {
    case string(String)
    case uint32(UInt32)

    package init(stringLiteral value: String) { self = .string(value) }
}

/// A borrowed incoming message, read in order. Valid only inside the call that hands it out.
package struct BusMessageReader: ~Copyable {
    let message: OpaquePointer

    /// Reads a string ("s") or an object path ("o").
    package mutating func readString(_ type: Character = "s") -> String? {
        var value: UnsafePointer<CChar>? = nil
        let result = withUnsafeMutablePointer(to: &value) {
            tk_sd_bus_message_read_basic(message, Self.typeCode(type), $0)
        }
        guard result > 0, let value else { return nil }
        return String(cString: value)
    }

    /// Reads a boolean ("b"), which sd-bus stores as a C int.
    package mutating func readBool() -> Bool? {
        var value: Int32 = 0
        guard tk_sd_bus_message_read_basic(message, Self.typeCode("b"), &value) > 0 else { return nil }
        return value != 0
    }

    /// Reads a Unix file descriptor ("h"), as a descriptor of the caller's own (close-on-exec),
    /// which it closes: the message's own closes with the message.
    package mutating func readUnixFD() -> Int32? {
        var borrowed: Int32 = -1
        guard tk_sd_bus_message_read_basic(message, Self.typeCode("h"), &borrowed) > 0, borrowed >= 0 else {
            return nil
        }
        let descriptor = fcntl(borrowed, F_DUPFD_CLOEXEC, 3)
        return descriptor >= 0 ? descriptor : nil
    }

    /// Reads an array of strings ("as").
    package mutating func readStringArray() -> [String]? {
        guard tk_sd_bus_message_enter_container(message, Self.typeCode("a"), "s") > 0 else { return nil }
        var strings: [String] = []
        while true {
            var value: UnsafePointer<CChar>? = nil
            let result = withUnsafeMutablePointer(to: &value) {
                tk_sd_bus_message_read_basic(message, Self.typeCode("s"), $0)
            }
            if result < 0 { return nil }
            guard result > 0, let value else { break }
            strings.append(String(cString: value))
        }
        guard tk_sd_bus_message_exit_container(message) >= 0 else { return nil }
        return strings
    }

    /// Enters a container: an array ("a") of `contents`, a variant ("v") holding `contents`, a
    /// struct ("r") or dict entry ("e") made of `contents`.
    ///
    /// - Returns: false at the end of an array, or when the next value is not such a container.
    package mutating func enter(_ type: Character, _ contents: String) -> Bool {
        tk_sd_bus_message_enter_container(message, Self.typeCode(type), contents) > 0
    }

    /// Leaves the container entered last, which must have been read to its end.
    package mutating func exit() -> Bool {
        tk_sd_bus_message_exit_container(message) >= 0
    }

    /// Skips values of the complete types `types` ("v", "sv", ...), unread.
    package mutating func skip(_ types: String) -> Bool {
        tk_sd_bus_message_skip(message, types) >= 0
    }

    /// Reads a variant ("v") that holds a boolean; nil when it holds anything else.
    package mutating func readVariantBool() -> Bool? {
        guard enter("v", "b") else { return nil }
        let value = readBool()
        guard exit() else { return nil }
        return value
    }

    private static func typeCode(_ type: Character) -> CChar {
        CChar(bitPattern: type.asciiValue ?? 0)
    }
}
