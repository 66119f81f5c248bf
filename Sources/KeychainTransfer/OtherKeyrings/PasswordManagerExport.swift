import FoundationEssentials
import KeychainService
import KeychainVocabulary
import WireFormat

#if canImport(Glibc)
import Glibc
#endif

/// Reads the password exports of browsers and password managers (CSV, and Bitwarden's or a flat
/// JSON) into items: one login becomes one internet password when its URL names a host, else one
/// generic password.
///
/// Columns are recognised by their header (CSV) or key (flat JSON), ignoring case and
/// surrounding spaces; when a file has more than one column for the same role, the first name
/// in this table wins. Every other column is ignored.
///
/// | Role     | Column names                                     | Becomes                                   |
/// |----------|--------------------------------------------------|-------------------------------------------|
/// | name     | `name`, `title`                                  | label; service of a generic password      |
/// | URL      | `url`, `login_uri`, `uri`, `website`, `web site` | server, protocol, port, path              |
/// | account  | `username`, `login_username`, `login`, `user`, `user name` | account (`acct`)                |
/// | password | `password`, `login_password`                     | the value (a UTF-8 string)                |
/// | note     | `note`, `notes`, `extra`, `comment`              | comment (`icmt`), at most 4096 bytes      |
/// | type     | `type`                                           | only rows of type `login` are read        |
///
/// That covers the CSV of Chrome and Edge (`name,url,username,password,note`), Firefox
/// (`url,username,password,httpRealm,…`), Bitwarden (`folder,favorite,type,name,notes,fields,
/// reminder,login_uri,login_username,login_password,login_totp`), KeePassXC (`Group,Title,
/// Username,Password,URL,Notes,…`), 1Password (`Title,Url,Username,Password,Notes`) and LastPass
/// (`url,username,password,totp,extra,name,grouping,fav`).
///
/// A row becomes:
/// - an internet password when its URL parses with a host (a bare host such as `example.com`,
///   with a dot and no spaces, `@` or `://`, is read as `https://example.com`): server = the
///   host in lower case; protocol = Apple's code for the URL's scheme when it has one
///   (`htps`, `http`, `ftp `, `ftps`, `imap`, `imps`, `smtp`), absent for any other scheme and
///   for a bare host; port = the URL's port, 0 when it has none (as
///   `add-internet-password` and the git helper store it, so they name the same item); path = the URL's path
///   unless empty or `/`; account; label = the name, else the host. A user name or password
///   inside the URL is never used.
/// - else a generic password: service and label = the name, else the URL text; account.
///
/// Every item is `whenUnlocked`, its value of kind `.string`. Dates are left to the writer.
///
/// A row is skipped, with its reason in the report, when its `type` is present and not
/// `login`, its password is empty, its note is over 4096 UTF-8 bytes (it is not truncated: a cut
/// note may lose what mattered), it has neither a name nor a URL, or a value is over the store's
/// size limits.
package enum PasswordManagerExport {
    package typealias Report = ForeignImportReport

    /// The most a note may hold, in UTF-8 bytes, to become an item's comment.
    package static let maximumNoteSize = 4096

    /// Reads a CSV export.
    ///
    /// Skipped rows are numbered as data rows (1-based, the header not counted); their reasons
    /// name the line of the file.
    ///
    /// - Throws: ``ForeignImportError``: `.malformedInput` for text that is not CSV (see
    ///   ``CSVTable``), `.unrecognizedFormat` when no column is a password column.
    package static func items(csv text: String) throws(ForeignImportError) -> Report {
        let table = try CSVTable(parsing: text)
        let normalized = table.header.map(Column.normalize)
        var indices: [Column: Int] = [:]
        for column in Column.allCases {
            for name in column.names {
                if let index = normalized.firstIndex(of: name) {
                    indices[column] = index
                    break
                }
            }
        }
        guard indices[.password] != nil else {
            throw ForeignImportError(
                .unrecognizedFormat,
                "the CSV header (\(table.header.count) column\(table.header.count == 1 ? "" : "s")) has no password column: expected one named \(Column.passwordNames)"
            )
        }
        var report = Report()
        for (offset, row) in table.rows.enumerated() {
            var entry = Entry()
            entry.name = indices[.name].map { row[$0] } ?? ""
            entry.url = indices[.url].map { row[$0] } ?? ""
            entry.account = indices[.account].map { row[$0] } ?? ""
            entry.password = indices[.password].map { row[$0] } ?? ""
            entry.note = indices[.note].map { row[$0] } ?? ""
            entry.type = indices[.type].map { row[$0] }
            record(entry, row: offset + 1, place: "line \(table.rowLines[offset])", in: &report)
        }
        return report
    }

    /// Reads a JSON export: Bitwarden's unencrypted export (an object whose `items` are ciphers;
    /// only logins, `"type": 1`, are read, with their first URI), or an array of flat objects
    /// whose keys are the CSV column names above and whose values are strings (null counts as
    /// empty).
    ///
    /// Skipped entries are numbered by their place in the array, 1-based.
    ///
    /// - Throws: ``ForeignImportError``: `.malformedInput` for JSON that does not parse or has a
    ///   value of the wrong type where a Bitwarden field is expected (the message gives its
    ///   path, not its value); `.unrecognizedFormat` for an encrypted Bitwarden export, JSON of
    ///   neither shape, or flat objects none of which has a password key.
    package static func items(json data: [UInt8]) throws(ForeignImportError) -> Report {
        var start = data.startIndex
        if data.starts(with: [0xEF, 0xBB, 0xBF]) { start += 3 }
        let whitespace: Set<UInt8> = [0x20, 0x09, 0x0A, 0x0D]
        while start < data.endIndex, whitespace.contains(data[start]) { start += 1 }
        guard start < data.endIndex else {
            throw ForeignImportError(.malformedInput, "the JSON text is empty")
        }
        var json = Data(data[start...])
        defer { json.resetBytes(in: 0..<json.count) }
        switch data[start] {
        case UInt8(ascii: "{"):
            return try bitwardenItems(try decode(BitwardenExport.self, from: json))
        case UInt8(ascii: "["):
            return try flatItems(try decode([[String: FlatValue]].self, from: json))
        default:
            throw ForeignImportError(
                .unrecognizedFormat,
                "the JSON is neither Bitwarden's export (an object with \"items\") nor an array of objects")
        }
    }

    // MARK: Rows to items

    /// The roles a column can have, each with the names that give it that role.
    enum Column: CaseIterable {
        case name, url, account, password, note, type

        var names: [String] {
            switch self {
            case .name: ["name", "title"]
            case .url: ["url", "login_uri", "uri", "website", "web site"]
            case .account: ["username", "login_username", "login", "user", "user name"]
            case .password: ["password", "login_password"]
            case .note: ["note", "notes", "extra", "comment"]
            case .type: ["type"]
            }
        }

        /// The password column's names, quoted, for messages.
        static let passwordNames = Column.password.names.map { "\"" + $0 + "\"" }.joined(separator: " or ")

        static func normalize(_ name: String) -> String {
            name.trimmingWhitespace().lowercased()
        }
    }

    /// One login as any of the formats gives it, before it is mapped.
    struct Entry {
        var name = ""
        var url = ""
        var account = ""
        var password = ""
        var note = ""
        /// nil when the format has no type column.
        var type: String?
    }

    /// Adds `entry` to `report` as an item, or as a skipped row whose reason starts with
    /// `place` and the entry's name.
    private static func record(_ entry: Entry, row: Int, place: String, in report: inout Report) {
        switch item(from: entry) {
        case .item(let item):
            report.items.append(item)
        case .skipped(let reason):
            report.skipped.append(.init(row: row, reason: "\(place)\(describe(entry.name)): \(reason)"))
        }
    }

    /// ` ("name")`, shortened, or nothing for an entry without a name. Names are not secrets;
    /// they tell the user which row to fix.
    private static func describe(_ name: String) -> String {
        let trimmed = name.trimmingWhitespace()
        guard !trimmed.isEmpty else { return "" }
        let shown = trimmed.count > 60 ? String(trimmed.prefix(57)) + "..." : trimmed
        return " (\"\(shown)\")"
    }

    enum Outcome {
        case item(TransferItem)
        case skipped(String)
    }

    static func item(from entry: Entry) -> Outcome {
        if let type = entry.type, Column.normalize(type) != "login" {
            return .skipped("its type is \"\(type)\", not \"login\"; only logins are imported")
        }
        guard !entry.password.isEmpty else { return .skipped("it has no password") }
        guard entry.password.utf8.count <= ItemValue.maximumSize else {
            return .skipped("its password is over \(ItemValue.maximumSize) bytes, more than an item holds")
        }
        let noteSize = entry.note.utf8.count
        guard noteSize <= maximumNoteSize else {
            return .skipped(
                "its note is \(noteSize) bytes, over the \(maximumNoteSize) an imported comment may hold; shorten the note (or move it elsewhere) and import again"
            )
        }
        let name = entry.name.trimmingWhitespace()
        let url = entry.url.trimmingWhitespace()
        for (what, text) in [("name", name), ("URL", url), ("user name", entry.account)]
        where text.utf8.count > AttributeList.maximumValueSize {
            return .skipped("its \(what) is over \(AttributeList.maximumValueSize) bytes, more than an attribute holds")
        }

        var attributes = AttributeList()
        attributes.setString(entry.account, for: AttributeTag.account)
        if !entry.note.isEmpty { attributes.setString(entry.note, for: AttributeTag.comment) }
        let value = ItemValue(kind: .string, bytes: Array(entry.password.utf8))

        if let location = WebLocation(url) {
            attributes.setString(location.host, for: AttributeTag.server)
            if let scheme = location.scheme, let code = InternetPasswordAttributes.protocolCodes[scheme],
                let bytes = InternetPasswordAttributes.fourCharacterCode(code)
            {
                attributes[AttributeTag.protocol] = bytes
            }
            // 0 for none, as add-internet-password and the git helper store it: the same item.
            attributes[AttributeTag.port] = InternetPasswordAttributes.port(location.port)
            if let path = location.path { attributes.setString(path, for: AttributeTag.path) }
            attributes.setString(name.isEmpty ? location.host : name, for: AttributeTag.label)
            return .item(
                TransferItem(
                    itemClass: .internetPassword, accessibility: .whenUnlocked, attributes: attributes, value: value))
        }
        let service = name.isEmpty ? url : name
        guard !service.isEmpty else {
            return .skipped("it has neither a name nor a URL, so nothing names the item")
        }
        attributes.setString(service, for: AttributeTag.service)
        attributes.setString(service, for: AttributeTag.label)
        return .item(
            TransferItem(
                itemClass: .genericPassword, accessibility: .whenUnlocked, attributes: attributes, value: value))
    }

    /// What an internet password takes from a URL.
    struct WebLocation {
        /// Lower case, never empty.
        var host: String
        /// Lower case; nil for a bare host, whose `https` was assumed, not given.
        var scheme: String?
        /// nil when the URL gives none (or 0).
        var port: UInt16?
        /// nil when empty or `/`.
        var path: String?

        init?(_ text: String) {
            guard !text.isEmpty else { return nil }
            if let parsed = URLComponents(string: text), let scheme = parsed.scheme, let host = parsed.host,
                !host.isEmpty
            {
                self.init(parsed, host: host, scheme: scheme.lowercased())
            } else if text.contains("."), !text.contains(where: \.isWhitespace), !text.contains("@"),
                !text.contains("://"),
                let parsed = URLComponents(string: "https://" + text), let host = parsed.host, !host.isEmpty
            {
                self.init(parsed, host: host, scheme: nil)
            } else {
                return nil
            }
        }

        private init(_ parsed: URLComponents, host: String, scheme: String?) {
            self.host = host.lowercased()
            self.scheme = scheme
            port = parsed.port.flatMap { $0 > 0 ? UInt16(exactly: $0) : nil }
            let path = parsed.path
            self.path = path.isEmpty || path == "/" ? nil : path
        }
    }

    // MARK: JSON

    /// Bitwarden's export (`bw export --format json`, or the web vault's "Export vault" as
    /// .json): only what a login item maps to; every other key is ignored.
    struct BitwardenExport: Decodable {
        var encrypted: Bool?
        var items: [BitwardenItem]?
    }

    struct BitwardenItem: Decodable {
        /// 1 login, 2 secure note, 3 card, 4 identity, 5 SSH key.
        var type: Int?
        var name: String?
        var notes: String?
        var login: BitwardenLogin?
    }

    struct BitwardenLogin: Decodable {
        var username: String?
        var password: String?
        var uris: [BitwardenURI]?
    }

    struct BitwardenURI: Decodable {
        var uri: String?
    }

    /// A value of a flat object: text, null, or anything else (a number, an object), which a
    /// recognised key must not have.
    enum FlatValue: Decodable {
        case text(String)
        case null
        case other

        init(from decoder: any Decoder) throws {
            let container = try decoder.singleValueContainer()
            if container.decodeNil() {
                self = .null
            } else if let text = try? container.decode(String.self) {
                self = .text(text)
            } else {
                self = .other
            }
        }
    }

    private static func bitwardenItems(_ export: BitwardenExport) throws(ForeignImportError) -> Report {
        if export.encrypted == true {
            throw ForeignImportError(
                .unrecognizedFormat,
                "this Bitwarden export is encrypted: export the vault again as unencrypted JSON (or CSV), import that file, then delete it"
            )
        }
        guard let items = export.items else {
            throw ForeignImportError(
                .unrecognizedFormat,
                "the JSON object has no \"items\" array, so it is not a Bitwarden export; other JSON must be an array of objects"
            )
        }
        var report = Report()
        for (offset, item) in items.enumerated() {
            let name = item.name ?? ""
            guard item.type == 1 else {
                let type = item.type.map { "type \($0)" } ?? "no type"
                report.skipped.append(
                    .init(
                        row: offset + 1,
                        reason:
                            "item \(offset + 1)\(describe(name)): it has \(type), not 1 (a login); only logins are imported"
                    ))
                continue
            }
            var entry = Entry()
            entry.name = name
            entry.note = item.notes ?? ""
            entry.account = item.login?.username ?? ""
            entry.password = item.login?.password ?? ""
            entry.url = (item.login?.uris ?? []).compactMap(\.uri).first(where: { !$0.isEmpty }) ?? ""
            record(entry, row: offset + 1, place: "item \(offset + 1)", in: &report)
        }
        return report
    }

    private static func flatItems(_ objects: [[String: FlatValue]]) throws(ForeignImportError) -> Report {
        let lowered: [[String: FlatValue]] = objects.map { object in
            Dictionary(object.map { (Column.normalize($0.key), $0.value) }, uniquingKeysWith: { first, _ in first })
        }
        guard
            lowered.isEmpty
                || lowered.contains(where: { object in Column.password.names.contains { object[$0] != nil } })
        else {
            throw ForeignImportError(
                .unrecognizedFormat,
                "no object of the JSON array has a password key: expected one named \(Column.passwordNames)"
            )
        }
        var report = Report()
        for (offset, object) in lowered.enumerated() {
            var entry = Entry()
            var wrongType: [String] = []
            func text(_ column: Column) -> String? {
                guard let key = column.names.first(where: { object[$0] != nil }), let value = object[key] else {
                    return nil
                }
                switch value {
                case .text(let text): return text
                case .null: return ""
                case .other:
                    wrongType.append(key)
                    return nil
                }
            }
            entry.name = text(.name) ?? ""
            entry.url = text(.url) ?? ""
            entry.account = text(.account) ?? ""
            entry.password = text(.password) ?? ""
            entry.note = text(.note) ?? ""
            entry.type = text(.type)
            if !wrongType.isEmpty {
                let keys = wrongType.map { "\"" + $0 + "\"" }.joined(separator: ", ")
                report.skipped.append(
                    .init(
                        row: offset + 1,
                        reason: "item \(offset + 1)\(describe(entry.name)): its \(keys) value is not a string"))
                continue
            }
            record(entry, row: offset + 1, place: "item \(offset + 1)", in: &report)
        }
        return report
    }

    /// Decodes `json`, turning a failure into a message that gives the path of the value at
    /// fault and never the value (nor the decoder's own description, which may quote the text).
    private static func decode<T: Decodable>(_ type: T.Type, from json: Data) throws(ForeignImportError) -> T {
        do {
            return try JSONDecoder().decode(type, from: json)
        } catch let error as DecodingError {
            switch error {
            case .typeMismatch(_, let context):
                throw ForeignImportError(
                    .malformedInput,
                    "the JSON value at \(path(context.codingPath)) has the wrong type for this format (a string, number, object or array where another is expected)"
                )
            case .valueNotFound(_, let context):
                throw ForeignImportError(
                    .malformedInput, "the JSON value at \(path(context.codingPath)) is null where a value is expected")
            case .keyNotFound(let key, let context):
                throw ForeignImportError(
                    .malformedInput,
                    "the JSON object at \(path(context.codingPath)) has no \"\(key.stringValue)\"")
            case .dataCorrupted(let context) where !context.codingPath.isEmpty:
                throw ForeignImportError(.malformedInput, "the JSON value at \(path(context.codingPath)) is not valid")
            default:
                throw ForeignImportError(.malformedInput, "the text is not valid JSON")
            }
        } catch {
            throw ForeignImportError(.malformedInput, "the text is not valid JSON")
        }
    }

    /// A JSONPath for a coding path, array indices counted from 0 as JSONPath counts them:
    /// `$.items[3].login.password`, or `$` for the top level.
    private static func path(_ codingPath: [any CodingKey]) -> String {
        var text = "$"
        for key in codingPath {
            if let index = key.intValue {
                text += "[\(index)]"
            } else {
                text += "." + key.stringValue
            }
        }
        return text
    }
}
