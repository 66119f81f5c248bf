/// Why another keyring's export could not be read at all. A problem with one row or one entry
/// does not throw: it becomes a ``ForeignImportReport/Skipped`` entry of the report, so one bad
/// row never costs the rest of the file.
///
/// The message says what was wrong and where (a line, an item number, a path), never what a
/// field held: fields of these files are passwords and notes.
package struct ForeignImportError: Error, CustomStringConvertible {
    /// The kind of failure, for a caller that maps it to an exit status. Extensible: new codes
    /// are static members, so a switch over them keeps compiling.
    package struct Code: Hashable, Sendable, CustomStringConvertible {
        package let rawValue: String

        package init(rawValue: String) { self.rawValue = rawValue }

        /// The text is not well-formed CSV or JSON (an unterminated quote, a row with the wrong
        /// number of fields, a JSON syntax or type error).
        package static let malformedInput = Code(rawValue: "malformed input")
        /// Well-formed, but not an export this reader knows: no password column, an encrypted
        /// Bitwarden export, JSON of another shape.
        package static let unrecognizedFormat = Code(rawValue: "unrecognized format")
        /// The source cannot be read: a `pass` directory that is missing, not a directory, or
        /// cannot be listed.
        package static let unreadableSource = Code(rawValue: "unreadable source")
        /// A program the reader runs (gpg) cannot be found or started.
        package static let toolUnavailable = Code(rawValue: "tool unavailable")

        package var description: String { rawValue }
    }

    package let code: Code
    /// What was wrong and where; never a field's content.
    package let message: String

    package init(_ code: Code, _ message: String) {
        self.code = code
        self.message = message
    }

    package var description: String { message }
}

/// What a reader of another keyring's export made of it: the items to write, in the order the
/// export lists them, and the rows or entries it left out with the reason for each.
///
/// - Important: ``items`` hold the secrets. Keep the report only as long as the write that takes
///   its items.
package struct ForeignImportReport: Sendable {
    /// One row, object or entry that did not become an item.
    package struct Skipped: Sendable, Hashable {
        /// 1-based: the data row of a CSV file (the header not counted), the element of a JSON
        /// array, or the entry of a `pass` store in the order it was read.
        package var row: Int
        /// Where it is (a CSV line, a JSON item, a `pass` entry name) and why it was left out;
        /// never a secret.
        package var reason: String

        package init(row: Int, reason: String) {
            self.row = row
            self.reason = reason
        }
    }

    package var items: [TransferItem]
    package var skipped: [Skipped]

    package init(items: [TransferItem] = [], skipped: [Skipped] = []) {
        self.items = items
        self.skipped = skipped
    }
}
