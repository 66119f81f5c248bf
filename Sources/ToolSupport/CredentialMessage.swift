/// git's credential description (git-credential(1), "INPUT/OUTPUT FORMAT"): `key=value` lines,
/// ended by a blank line or the end of input. Read by git-credential-tpm-keychain; it lives here
/// so that the parser fuzzing harness reaches it too. A key is everything before the first `=`; a value
/// is any bytes but newline and NUL, so values are kept as bytes, never reinterpreted as text.
/// A key given twice keeps its last value, as git's own reader does.
package struct CredentialMessage {
    /// The attributes in the order they came, keys decoded leniently (only known ASCII keys matter).
    package private(set) var attributes: [(key: String, value: [UInt8])] = []

    /// The most input a description can sensibly be: git writes a few hundred bytes.
    package static let maximumSize = 1 << 20

    package init() {}

    /// Parses `bytes` up to the first blank line. A trailing carriage return is dropped from each
    /// line, as git's `strbuf_getline` does.
    ///
    /// - Throws: ``HelperFailure`` (usage) for a line that is not `key=value`; the message names
    ///   the line by number, never by content, which may be a password.
    package init(parsing bytes: [UInt8]) throws(HelperFailure) {
        var lineNumber = 0
        for rawLine in bytes.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false) {
            lineNumber += 1
            let line = rawLine.last == UInt8(ascii: "\r") ? rawLine.dropLast() : rawLine
            if line.isEmpty { break }
            guard let equals = line.firstIndex(of: UInt8(ascii: "=")) else {
                throw HelperFailure(
                    ExitStatus.usage, "line \(lineNumber) of the credential description is not key=value")
            }
            attributes.append((String(decoding: line[..<equals], as: UTF8.self), Array(line[(equals + 1)...])))
        }
    }

    /// The last value given for `key`.
    package subscript(key: String) -> [UInt8]? {
        attributes.last { $0.key == key }?.value
    }

    package mutating func append(_ key: String, _ value: [UInt8]) {
        attributes.append((key, value))
    }

    /// Whether `value` can stand in a `key=value` line without changing what git reads: no
    /// newline or carriage return (git-credential's parser would start another attribute there,
    /// the CVE-2020-5260 and CVE-2024-52006 class) and no NUL.
    package static func isSafeValue(_ value: [UInt8]) -> Bool {
        !value.contains { $0 == UInt8(ascii: "\n") || $0 == UInt8(ascii: "\r") || $0 == 0 }
    }

    /// The key of the first value that ``isSafeValue(_:)`` refuses, if any.
    package var unsafeKey: String? {
        attributes.first { !Self.isSafeValue($0.value) }?.key
    }

    /// `key=value` lines, each ending in a newline.
    package var encoded: [UInt8] {
        var bytes: [UInt8] = []
        for (key, value) in attributes {
            bytes += Array(key.utf8) + [UInt8(ascii: "=")] + value + [UInt8(ascii: "\n")]
        }
        return bytes
    }
}

/// A failure of the git credential helper itself (input, arguments), with its exit status.
/// Messages never carry a credential's value.
package struct HelperFailure: Error, CustomStringConvertible {
    package let status: Int32
    package let description: String

    package init(_ status: Int32, _ description: String) {
        self.status = status
        self.description = description
    }
}
