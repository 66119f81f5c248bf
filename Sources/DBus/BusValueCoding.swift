// BusValue to and from sd_bus_message: the generic reader and writer a server needs, part of the
// confinement BusConnection.swift describes.

internal import CSystemdBus

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// Reads every value left in `message` (a method call's arguments), in order.
///
/// - Throws: `BusError` (`org.freedesktop.DBus.Error.InvalidArgs`) for a message sd-bus cannot read.
func readArguments(_ message: OpaquePointer) throws(BusError) -> [BusValue] {
    var values: [BusValue] = []
    while let value = try readValue(message) { values.append(value) }
    return values
}

/// The next complete value, or nil at the end of the message or the container entered last.
private func readValue(_ message: OpaquePointer) throws(BusError) -> BusValue? {
    var type: CChar = 0
    var contentsPointer: UnsafePointer<CChar>? = nil
    let peeked = tk_sd_bus_message_peek_type(message, &type, &contentsPointer)
    try checkRead(peeked)
    if peeked == 0 { return nil }
    let contents = contentsPointer.map { String(cString: $0) } ?? ""
    switch UInt8(bitPattern: type) {
    case UInt8(ascii: "a"):
        if contents == "y" {
            var bytes: UnsafeRawPointer? = nil
            var size = 0
            try checkRead(tk_sd_bus_message_read_array(message, CChar(UInt8(ascii: "y")), &bytes, &size))
            guard let bytes else { return .bytes([]) }
            return .bytes(Array(UnsafeRawBufferPointer(start: bytes, count: size)))
        }
        return .array(element: contents, try readContainer(message, type, contents))
    case UInt8(ascii: "v"):
        let inner = try readContainer(message, type, contents)
        guard inner.count == 1 else { throw invalid("a variant holds \(inner.count) values") }
        return .variant(inner[0])
    case UInt8(ascii: "r"):
        return .structure(try readContainer(message, type, contents))
    case UInt8(ascii: "e"):
        let pair = try readContainer(message, type, contents)
        guard pair.count == 2 else { throw invalid("a dictionary entry holds \(pair.count) values") }
        return .dictionaryEntry(pair[0], pair[1])
    case UInt8(ascii: "s"), UInt8(ascii: "o"), UInt8(ascii: "g"):
        var text: UnsafePointer<CChar>? = nil
        try checkRead(withUnsafeMutablePointer(to: &text) { tk_sd_bus_message_read_basic(message, type, $0) })
        let string = text.map { String(cString: $0) } ?? ""
        switch UInt8(bitPattern: type) {
        case UInt8(ascii: "o"): return .objectPath(string)
        case UInt8(ascii: "g"): return .signature(string)
        default: return .string(string)
        }
    case UInt8(ascii: "y"): return .byte(try readBasic(message, type, UInt8(0)))
    case UInt8(ascii: "b"): return .bool(try readBasic(message, type, Int32(0)) != 0)
    case UInt8(ascii: "n"): return .int16(try readBasic(message, type, Int16(0)))
    case UInt8(ascii: "q"): return .uint16(try readBasic(message, type, UInt16(0)))
    case UInt8(ascii: "i"): return .int32(try readBasic(message, type, Int32(0)))
    case UInt8(ascii: "u"): return .uint32(try readBasic(message, type, UInt32(0)))
    case UInt8(ascii: "x"): return .int64(try readBasic(message, type, Int64(0)))
    case UInt8(ascii: "t"): return .uint64(try readBasic(message, type, UInt64(0)))
    case UInt8(ascii: "d"): return .double(try readBasic(message, type, Double(0)))
    // Owned by the message: see BusValue.unixFD.
    case UInt8(ascii: "h"): return .unixFD(try readBasic(message, type, Int32(-1)))
    default:
        // Anything newer: no method this package serves takes it.
        throw invalid("values of type '\(Character(Unicode.Scalar(UInt8(bitPattern: type))))' are not accepted")
    }
}

private func readContainer(_ message: OpaquePointer, _ type: CChar, _ contents: String) throws(BusError) -> [BusValue] {
    try checkRead(tk_sd_bus_message_enter_container(message, type, contents))
    var values: [BusValue] = []
    while let value = try readValue(message) { values.append(value) }
    try checkRead(tk_sd_bus_message_exit_container(message))
    return values
}

private func readBasic<T: BitwiseCopyable>(_ message: OpaquePointer, _ type: CChar, _ initial: T) throws(BusError) -> T
{
    var value = initial
    try checkRead(tk_sd_bus_message_read_basic(message, type, &value))
    return value
}

private func checkRead(_ result: Int32) throws(BusError) {
    guard result < 0 else { return }
    throw invalid(String(cString: strerror(-result)))
}

private func invalid(_ message: String) -> BusError {
    BusError(operation: "read", name: "org.freedesktop.DBus.Error.InvalidArgs", message: message, errno: EINVAL)
}

/// Appends `values` to `message`, in order.
///
/// - Throws: `BusError` when sd-bus refuses a value (an object path or signature that is not valid).
func append(_ values: [BusValue], to message: OpaquePointer) throws(BusError) {
    for value in values { try append(value, to: message) }
}

private func append(_ value: BusValue, to message: OpaquePointer) throws(BusError) {
    let type = CChar(bitPattern: value.signature.utf8.first ?? 0)
    switch value {
    case .string(let text), .objectPath(let text), .signature(let text):
        try checkWrite(text.withCString { tk_sd_bus_message_append_basic(message, type, $0) })
    case .byte(var number): try checkWrite(tk_sd_bus_message_append_basic(message, type, &number))
    case .bool(let flag):
        var number: Int32 = flag ? 1 : 0
        try checkWrite(tk_sd_bus_message_append_basic(message, type, &number))
    case .int16(var number): try checkWrite(tk_sd_bus_message_append_basic(message, type, &number))
    case .uint16(var number): try checkWrite(tk_sd_bus_message_append_basic(message, type, &number))
    case .int32(var number): try checkWrite(tk_sd_bus_message_append_basic(message, type, &number))
    case .uint32(var number): try checkWrite(tk_sd_bus_message_append_basic(message, type, &number))
    case .int64(var number): try checkWrite(tk_sd_bus_message_append_basic(message, type, &number))
    case .uint64(var number): try checkWrite(tk_sd_bus_message_append_basic(message, type, &number))
    case .double(var number): try checkWrite(tk_sd_bus_message_append_basic(message, type, &number))
    case .unixFD(var descriptor): try checkWrite(tk_sd_bus_message_append_basic(message, type, &descriptor))
    case .bytes(let bytes):
        try checkWrite(
            bytes.withUnsafeBytes {
                tk_sd_bus_message_append_array(message, CChar(UInt8(ascii: "y")), $0.baseAddress, $0.count)
            })
    case .array(let element, let elements):
        try checkWrite(tk_sd_bus_message_open_container(message, type, element))
        for element in elements { try append(element, to: message) }
        try checkWrite(tk_sd_bus_message_close_container(message))
    case .structure(let fields):
        try checkWrite(
            tk_sd_bus_message_open_container(message, CChar(UInt8(ascii: "r")), fields.map(\.signature).joined()))
        for field in fields { try append(field, to: message) }
        try checkWrite(tk_sd_bus_message_close_container(message))
    case .dictionaryEntry(let key, let entryValue):
        try checkWrite(
            tk_sd_bus_message_open_container(message, CChar(UInt8(ascii: "e")), key.signature + entryValue.signature))
        try append(key, to: message)
        try append(entryValue, to: message)
        try checkWrite(tk_sd_bus_message_close_container(message))
    case .variant(let inner):
        try checkWrite(tk_sd_bus_message_open_container(message, type, inner.signature))
        try append(inner, to: message)
        try checkWrite(tk_sd_bus_message_close_container(message))
    }
}

private func checkWrite(_ result: Int32) throws(BusError) {
    guard result < 0 else { return }
    throw BusError(operation: "append", name: nil, message: String(cString: strerror(-result)), errno: -result)
}
