/// A table read from CSV as RFC 4180 defines it, the format browsers and password managers
/// export:
///
/// - Fields are separated by commas, records end with CRLF or LF (a CR at the very end of the
///   text ends the last record too; a CR anywhere else in an unquoted field is kept as data).
/// - A field in double quotes may hold commas, CR and LF; a double quote inside it is written
///   twice (`""`). After a closing quote only a comma or the end of the record may follow.
/// - A double quote inside an unquoted field is kept as data, as most exporters' readers do.
/// - A UTF-8 byte order mark at the start is dropped. Empty lines (nothing between two line
///   ends, outside quotes) are ignored wherever they are, trailing ones included.
/// - The first record is the header; every other record must have as many fields as it.
///
/// Messages name lines by number (1-based, counting every line of the text, blank ones and
/// those inside quoted fields included), never by content: a field may be a password.
package struct CSVTable: Sendable {
    /// The first record's fields, as written (no trimming, no case folding).
    package let header: [String]
    /// Every other record, each with `header.count` fields.
    package let rows: [[String]]
    /// For each element of ``rows``, the line of the text its record starts on: what messages
    /// about a row name.
    package let rowLines: [Int]

    /// - Throws: ``ForeignImportError`` (`.malformedInput`) for an empty text, a quoted field
    ///   that is never closed, text after a closing quote, or a record whose field count differs
    ///   from the header's; the message names the line.
    package init(parsing text: String) throws(ForeignImportError) {
        var bytes = Array(text.utf8)
        defer { for index in bytes.indices { bytes[index] = 0 } }
        let records = try Self.records(of: bytes)
        guard let first = records.first else {
            throw ForeignImportError(.malformedInput, "the CSV text is empty: it has no header line")
        }
        var rows: [[String]] = []
        var rowLines: [Int] = []
        rows.reserveCapacity(records.count - 1)
        rowLines.reserveCapacity(records.count - 1)
        for record in records.dropFirst() {
            guard record.fields.count == first.fields.count else {
                throw ForeignImportError(
                    .malformedInput,
                    "CSV line \(record.line) has \(record.fields.count) field\(record.fields.count == 1 ? "" : "s"), but the header (line \(first.line)) has \(first.fields.count): a field holding a comma, a double quote or a line break must be in double quotes"
                )
            }
            rows.append(record.fields)
            rowLines.append(record.line)
        }
        header = first.fields
        self.rows = rows
        self.rowLines = rowLines
    }

    private static let comma = UInt8(ascii: ",")
    private static let quote = UInt8(ascii: "\"")
    private static let carriageReturn = UInt8(ascii: "\r")
    private static let lineFeed = UInt8(ascii: "\n")

    /// Every record with the line it starts on. Fields are decoded from slices cut at ASCII
    /// bytes of valid UTF-8 (the text was a `String`), so decoding never repairs anything.
    private static func records(of bytes: [UInt8]) throws(ForeignImportError) -> [(line: Int, fields: [String])] {
        var records: [(line: Int, fields: [String])] = []
        var index = 0
        var line = 1
        let end = bytes.count
        if bytes.starts(with: [0xEF, 0xBB, 0xBF]) { index = 3 }

        // Whether a record ends at `position`: LF, CRLF, or a CR that is the text's last byte.
        func recordEnds(at position: Int) -> Bool {
            bytes[position] == lineFeed
                || (bytes[position] == carriageReturn && (position + 1 == end || bytes[position + 1] == lineFeed))
        }

        while index < end {
            // An empty line: skipped, but counted.
            if recordEnds(at: index) {
                index += bytes[index] == carriageReturn ? 1 : 0
                if index < end, bytes[index] == lineFeed { index += 1 }
                line += 1
                continue
            }
            let recordLine = line
            var fields: [String] = []
            while true {
                if index < end, bytes[index] == quote {
                    let openingLine = line
                    var field: [UInt8] = []
                    defer { for position in field.indices { field[position] = 0 } }
                    index += 1
                    var closed = false
                    while index < end {
                        let byte = bytes[index]
                        if byte == quote {
                            if index + 1 < end, bytes[index + 1] == quote {
                                field.append(quote)
                                index += 2
                                continue
                            }
                            index += 1
                            closed = true
                            break
                        }
                        if byte == lineFeed { line += 1 }
                        field.append(byte)
                        index += 1
                    }
                    guard closed else {
                        throw ForeignImportError(
                            .malformedInput,
                            "CSV line \(openingLine): a quoted field starts there and its closing double quote never comes"
                        )
                    }
                    guard index == end || bytes[index] == comma || recordEnds(at: index) else {
                        throw ForeignImportError(
                            .malformedInput,
                            "CSV line \(line): text follows a quoted field's closing double quote; a double quote inside a quoted field is written twice (\"\")"
                        )
                    }
                    fields.append(String(decoding: field, as: UTF8.self))
                } else {
                    let start = index
                    while index < end, bytes[index] != comma, !recordEnds(at: index) { index += 1 }
                    fields.append(String(decoding: bytes[start..<index], as: UTF8.self))
                }
                // After a field: a comma (another field follows, possibly empty at the end of
                // the text), or the end of the record.
                if index < end, bytes[index] == comma {
                    index += 1
                    continue
                }
                if index < end {
                    if bytes[index] == carriageReturn { index += 1 }
                    if index < end, bytes[index] == lineFeed {
                        index += 1
                        line += 1
                    }
                }
                break
            }
            records.append((recordLine, fields))
        }
        return records
    }
}
