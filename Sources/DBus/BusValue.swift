/// A D-Bus value of any type, as a method call's arguments or a reply's values carry it: what a
/// server reads without knowing the signature in advance, and checks against the one it expects.
///
/// Byte arrays (`ay`, secrets and parameters) are ``bytes(_:)``, not an array of bytes, so a
/// secret crosses the bus in one copy.
package indirect enum BusValue: Sendable, Hashable {
    case byte(UInt8)
    case bool(Bool)
    case int16(Int16)
    case uint16(UInt16)
    case int32(Int32)
    case uint32(UInt32)
    case int64(Int64)
    case uint64(UInt64)
    case double(Double)
    case string(String)
    case objectPath(String)
    case signature(String)
    /// `ay`.
    case bytes([UInt8])
    /// An array of values of the element signature `element` (kept for empty arrays).
    case array(element: String, [BusValue])
    /// A `(...)` struct.
    case structure([BusValue])
    /// A `{kv}` entry of a dictionary (an array of entries).
    case dictionaryEntry(BusValue, BusValue)
    case variant(BusValue)
    /// `h`: a Unix file descriptor. One received is borrowed from its message: valid only while
    /// the handler of the call that carried it runs (dup it to keep it); nothing leaks when a
    /// call that did not ask for one carries one. One sent is duplicated by sd-bus.
    case unixFD(Int32)

    /// The value's D-Bus signature.
    package var signature: String {
        switch self {
        case .byte: "y"
        case .bool: "b"
        case .int16: "n"
        case .uint16: "q"
        case .int32: "i"
        case .uint32: "u"
        case .int64: "x"
        case .uint64: "t"
        case .double: "d"
        case .string: "s"
        case .objectPath: "o"
        case .signature: "g"
        case .bytes: "ay"
        case .array(let element, _): "a" + element
        case .structure(let fields): "(" + fields.map(\.signature).joined() + ")"
        case .dictionaryEntry(let key, let value): "{" + key.signature + value.signature + "}"
        case .variant: "v"
        case .unixFD: "h"
        }
    }

    // MARK: Building

    /// `a{sv}` from names and values.
    package static func properties(_ entries: [(String, BusValue)]) -> BusValue {
        .array(element: "{sv}", entries.map { .dictionaryEntry(.string($0.0), .variant($0.1)) })
    }

    /// `a{ss}`, in key order (so replies are deterministic).
    package static func stringDictionary(_ dictionary: [String: String]) -> BusValue {
        .array(
            element: "{ss}",
            dictionary.sorted { $0.key < $1.key }.map { .dictionaryEntry(.string($0.key), .string($0.value)) })
    }

    /// `ao`.
    package static func objectPaths(_ paths: [String]) -> BusValue {
        .array(element: "o", paths.map { .objectPath($0) })
    }

    // MARK: Reading

    package var string: String? {
        if case .string(let text) = self { return text }
        return nil
    }

    package var objectPath: String? {
        if case .objectPath(let path) = self { return path }
        return nil
    }

    package var uint64: UInt64? {
        if case .uint64(let value) = self { return value }
        return nil
    }

    package var bool: Bool? {
        if case .bool(let value) = self { return value }
        return nil
    }

    package var byteArray: [UInt8]? {
        if case .bytes(let bytes) = self { return bytes }
        return nil
    }

    /// What a variant holds; the value itself for anything else.
    package var unwrapped: BusValue {
        if case .variant(let inner) = self { return inner.unwrapped }
        return self
    }

    /// The elements of an array (any element type).
    package var elements: [BusValue]? {
        if case .array(_, let elements) = self { return elements }
        return nil
    }

    /// The fields of a struct.
    package var fields: [BusValue]? {
        if case .structure(let fields) = self { return fields }
        return nil
    }

    /// An `a{s…}` dictionary by its string keys; nil for anything else, or when a key repeats.
    package var dictionary: [String: BusValue]? {
        guard case .array(let element, let entries) = self, element.hasPrefix("{s") else { return nil }
        var result: [String: BusValue] = [:]
        for entry in entries {
            guard case .dictionaryEntry(.string(let key), let value) = entry, result[key] == nil else { return nil }
            result[key] = value
        }
        return result
    }

    /// An `a{ss}` dictionary; nil for anything else.
    package var stringDictionary: [String: String]? {
        guard case .array("{ss}", _) = self, let entries = dictionary else { return nil }
        var result: [String: String] = [:]
        for (key, value) in entries {
            guard let text = value.string else { return nil }
            result[key] = text
        }
        return result
    }

    /// An `ao` array; nil for anything else.
    package var objectPathArray: [String]? {
        guard case .array("o", let elements) = self else { return nil }
        return elements.compactMap(\.objectPath)
    }
}
