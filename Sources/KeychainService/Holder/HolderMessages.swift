import KeychainStore
package import KeychainVocabulary
package import WireFormat

/// What a process asks the session holder (docs/FORMAT.md, "The session holder's protocol"):
/// the reads a short-lived process makes, for a store the holder keeps open, and the lock
/// state's changes, which make the holder let go of its keys.
package enum HolderRequest: Equatable, Sendable {
    /// The value of the generic password `identity` names (``ItemService/value(_:)``).
    case value(HolderStore, ItemIdentity)
    /// The items a query matches (``ItemService/query(_:)``).
    case query(HolderStore, HolderQuery)
    /// The item of a class its primary key names, with its secret when asked and under the
    /// master key (``ItemService/item(_:primary:withSecret:)``).
    case item(HolderStore, ItemClass, primary: AttributeList, withSecret: Bool)
    /// The keychain was locked: erase every key held, and answer every read "cold" until an unlock.
    case lock
    /// The keychain was unlocked: stores may be held again, each from its next read on.
    case unlock

    static let version: UInt8 = 1
    /// The longest request: a query's attributes are bounded by the item format's limits.
    package static let maximumLength = 1 << 20
    /// The longest text a message carries (a path, a TCTI, an access group, a reason to go cold).
    package static let maximumTextLength = 4096

    /// The store and the caller a read is for.
    package struct HolderStore: Equatable, Sendable {
        package let path: String
        /// The TCTI the caller's location names; nil: the holder chooses as `TPMChoice.automatic` does.
        package let tcti: String?
        package let deviceDirectory: String?
        package let face: AccessCaller.Face
        package let accessGroups: [String]?

        package init(
            path: String, tcti: String?, deviceDirectory: String?, face: AccessCaller.Face, accessGroups: [String]?
        ) {
            self.path = path
            self.tcti = tcti
            self.deviceDirectory = deviceDirectory
            self.face = face
            self.accessGroups = accessGroups
        }

        /// Whether a request can carry it: every text at most ``HolderRequest/maximumTextLength``
        /// bytes, as the holder reads them, and a count of access groups that fits its UINT16. A
        /// store that does not (a path longer than any the kernel opens) takes the cold path.
        package var fitsARequest: Bool {
            let texts = [path, tcti ?? "", deviceDirectory ?? ""] + (accessGroups ?? [])
            return texts.allSatisfy { $0.utf8.count <= HolderRequest.maximumTextLength }
                && (accessGroups?.count ?? 0) <= Int(UInt16.max)
        }
    }

    /// ``ItemQuery`` as it crosses the socket (``ItemQuery`` itself is not Equatable).
    package struct HolderQuery: Equatable, Sendable {
        package let itemClass: ItemClass
        package let matching: AttributeList
        package let synchronizable: UInt8
        package let limitsToOne: Bool
        package let returnsData: Bool

        package init(_ query: ItemQuery) {
            itemClass = query.itemClass
            matching = query.matching
            synchronizable =
                switch query.synchronizable {
                case .yes: 0
                case .no: 1
                case .any: 2
                }
            limitsToOne = query.limit == .one
            returnsData = query.returnsData
        }

        package var query: ItemQuery {
            ItemQuery(
                itemClass: itemClass, matching: matching,
                synchronizable: synchronizable == 0 ? .yes : synchronizable == 1 ? .no : .any,
                limit: limitsToOne ? .one : .all, returnsData: returnsData)
        }
    }

    private enum Operation: UInt8 {
        case value = 1
        case query = 2
        case lock = 3
        case unlock = 4
        case item = 5
    }

    package var encoded: [UInt8] {
        var writer = WireWriter()
        writer.append(Self.version)
        switch self {
        case .value(let store, let identity):
            writer.append(Operation.value.rawValue)
            Self.append(store, to: &writer)
            for name in [identity.accessGroup, identity.service, identity.account] {
                writer.appendSized(Array(name.utf8))
            }
        case .query(let store, let query):
            writer.append(Operation.query.rawValue)
            Self.append(store, to: &writer)
            writer.append(query.itemClass.rawValue)
            writer.append(query.synchronizable)
            writer.append(UInt8(query.limitsToOne ? 1 : 0))
            writer.append(UInt8(query.returnsData ? 1 : 0))
            Self.append(query.matching, to: &writer)
        case .item(let store, let itemClass, let primary, let withSecret):
            writer.append(Operation.item.rawValue)
            Self.append(store, to: &writer)
            writer.append(itemClass.rawValue)
            writer.append(UInt8(withSecret ? 1 : 0))
            Self.append(primary, to: &writer)
        case .lock:
            writer.append(Operation.lock.rawValue)
        case .unlock:
            writer.append(Operation.unlock.rawValue)
        }
        return writer.bytes
    }

    /// - Throws: ``WireFormatError`` for anything but a whole request this version writes.
    package init(parsing bytes: [UInt8]) throws(WireFormatError) {
        var reader = WireReader(bytes)
        guard try reader.readUInt8() == Self.version else { throw WireFormatError("Unknown request version") }
        guard let operation = Operation(rawValue: try reader.readUInt8()) else {
            throw WireFormatError("Unknown operation")
        }
        switch operation {
        case .value:
            let store = try Self.readStore(&reader)
            let group = try Self.readText(&reader)
            let (service, account) = (try Self.readText(&reader), try Self.readText(&reader))
            do throws(KeychainError) {
                self = .value(store, try ItemIdentity(accessGroup: group, service: service, account: account))
            } catch {
                throw WireFormatError(error.message)
            }
        case .query:
            let store = try Self.readStore(&reader)
            guard let itemClass = ItemClass(rawValue: try reader.readUInt32()) else {
                throw WireFormatError("Unknown item class")
            }
            let synchronizable = try reader.readUInt8()
            let (limit, returnsData) = (try reader.readUInt8(), try reader.readUInt8())
            guard synchronizable <= 2, limit <= 1, returnsData <= 1 else { throw WireFormatError("Bad query flags") }
            let matching = try Self.readAttributes(&reader)
            var query = ItemQuery(itemClass: itemClass, matching: matching)
            query.synchronizable = synchronizable == 0 ? .yes : synchronizable == 1 ? .no : .any
            query.limit = limit == 1 ? .one : .all
            query.returnsData = returnsData == 1
            self = .query(store, HolderQuery(query))
        case .item:
            let store = try Self.readStore(&reader)
            guard let itemClass = ItemClass(rawValue: try reader.readUInt32()) else {
                throw WireFormatError("Unknown item class")
            }
            let withSecret = try reader.readUInt8()
            guard withSecret <= 1 else { throw WireFormatError("Bad secret flag") }
            self = .item(store, itemClass, primary: try Self.readAttributes(&reader), withSecret: withSecret == 1)
        case .lock:
            self = .lock
        case .unlock:
            self = .unlock
        }
        guard reader.remaining == 0 else { throw WireFormatError("Bytes after the request") }
    }

    private static func append(_ store: HolderStore, to writer: inout WireWriter) {
        writer.appendSized(Array(store.path.utf8))
        appendOptional(store.tcti, to: &writer)
        appendOptional(store.deviceDirectory, to: &writer)
        writer.appendSized(Array(store.face.rawValue.utf8))
        if let groups = store.accessGroups {
            writer.append(UInt8(1))
            writer.append(UInt16(groups.count))
            for group in groups { writer.appendSized(Array(group.utf8)) }
        } else {
            writer.append(UInt8(0))
        }
    }

    static func append(_ attributes: AttributeList, to writer: inout WireWriter) {
        let encoded = attributes.encoded()
        writer.append(UInt32(encoded.count))
        writer.append(raw: encoded)
    }

    static func readAttributes(_ reader: inout WireReader) throws(WireFormatError) -> AttributeList {
        let count = Int(try reader.readUInt32())
        guard count <= maximumLength else { throw WireFormatError("Attributes over the limit") }
        let encoded = try reader.readBytes(count)
        do throws(KeychainError) {
            return try AttributeList(decoding: encoded, path: "the message")
        } catch {
            throw WireFormatError(error.message)
        }
    }

    private static func appendOptional(_ text: String?, to writer: inout WireWriter) {
        writer.append(UInt8(text == nil ? 0 : 1))
        if let text { writer.appendSized(Array(text.utf8)) }
    }

    private static func readStore(_ reader: inout WireReader) throws(WireFormatError) -> HolderStore {
        let path = try readText(&reader)
        let tcti = try readOptional(&reader)
        let deviceDirectory = try readOptional(&reader)
        guard let face = AccessCaller.Face(rawValue: try readText(&reader)) else {
            throw WireFormatError("Unknown face")
        }
        var groups: [String]?
        switch try reader.readUInt8() {
        case 0: groups = nil
        case 1:
            let count = Int(try reader.readUInt16())
            groups = []
            for _ in 0..<count { groups?.append(try readText(&reader)) }
        default: throw WireFormatError("Bad access groups flag")
        }
        return HolderStore(path: path, tcti: tcti, deviceDirectory: deviceDirectory, face: face, accessGroups: groups)
    }

    private static func readOptional(_ reader: inout WireReader) throws(WireFormatError) -> String? {
        switch try reader.readUInt8() {
        case 0: return nil
        case 1: return try readText(&reader)
        default: throw WireFormatError("Bad optional flag")
        }
    }

    static func readText(_ reader: inout WireReader) throws(WireFormatError) -> String {
        let bytes = try reader.readSized(maximum: HolderRequest.maximumTextLength)
        guard let text = String(validating: bytes, as: UTF8.self), !text.utf8.contains(0) else {
            throw WireFormatError("A name is not UTF-8 text without NUL")
        }
        return text
    }
}

/// The holder's answer: what the caller's own cold path would have given, or "cold" when the
/// holder does not answer (an item that needs a person or the TPM, a store it cannot open, a
/// lock): the caller then does the work itself, with the same result as without a holder.
package enum HolderResponse: Equatable, Sendable {
    case value(ItemValue?)
    case results([ItemQueryResult])
    case done
    case cold(String)

    /// The longest answer: a query's results with their secrets.
    package static let maximumLength = 256 << 20

    private enum Status: UInt8 {
        case value = 0
        case results = 1
        case done = 2
        case cold = 3
    }

    package var encoded: [UInt8] {
        var writer = WireWriter()
        // Sized once: a buffer grown by copying would leave freed copies of the secrets behind,
        // which nobody erases.
        writer.reserveCapacity(encodedLength)
        switch self {
        case .value(let value):
            writer.append(Status.value.rawValue)
            writer.append(UInt8(value == nil ? 0 : 1))
            if let value {
                writer.append(value.kind.rawValue)
                writer.append(UInt32(value.bytes.count))
                writer.append(raw: value.bytes)
            }
        case .results(let results):
            writer.append(Status.results.rawValue)
            writer.append(UInt32(results.count))
            for result in results {
                writer.appendSized(result.reference)
                writer.append(result.itemClass.rawValue)
                writer.append(result.accessibility.rawValue)
                writer.append(result.kind.rawValue)
                writer.appendSized(result.keyRecord)
                writer.append(UInt8(result.value == nil ? 0 : 1))
                if let value = result.value {
                    writer.append(UInt32(value.count))
                    writer.append(raw: value)
                }
                HolderRequest.append(result.attributes, to: &writer)
            }
        case .done:
            writer.append(Status.done.rawValue)
        case .cold(let reason):
            writer.append(Status.cold.rawValue)
            writer.appendSized(Array(reason.utf8.prefix(HolderRequest.maximumTextLength)))
        }
        return writer.bytes
    }

    /// The length of ``encoded``, as it writes it.
    package var encodedLength: Int {
        switch self {
        case .value(let value): 2 + (value.map { 1 + 4 + $0.bytes.count } ?? 0)
        case .results(let results):
            results.reduce(1 + 4) { length, result in
                length + 2 + result.reference.count + 4 + 1 + 1 + 2 + result.keyRecord.count + 1
                    + (result.value.map { 4 + $0.count } ?? 0) + 4 + result.attributes.encoded().count
            }
        case .done: 1
        case .cold(let reason): 1 + 2 + min(reason.utf8.count, HolderRequest.maximumTextLength)
        }
    }

    /// - Throws: ``WireFormatError`` for anything but a whole answer this version writes.
    package init(parsing bytes: [UInt8]) throws(WireFormatError) {
        var reader = WireReader(bytes)
        guard let status = Status(rawValue: try reader.readUInt8()) else { throw WireFormatError("Unknown status") }
        switch status {
        case .value:
            switch try reader.readUInt8() {
            case 0: self = .value(nil)
            case 1:
                guard let kind = ValueKind(rawValue: try reader.readUInt8()) else {
                    throw WireFormatError("Unknown value kind")
                }
                self = .value(ItemValue(kind: kind, bytes: try Self.readValue(&reader)))
            default: throw WireFormatError("Bad value flag")
            }
        case .results:
            let count = Int(try reader.readUInt32())
            guard count <= reader.remaining else { throw WireFormatError("More results than bytes") }
            var results: [ItemQueryResult] = []
            results.reserveCapacity(count)
            for _ in 0..<count { results.append(try Self.readResult(&reader)) }
            self = .results(results)
        case .done:
            self = .done
        case .cold:
            self = .cold(
                String(decoding: try reader.readSized(maximum: HolderRequest.maximumTextLength), as: UTF8.self))
        }
        guard reader.remaining == 0 else { throw WireFormatError("Bytes after the answer") }
    }

    private static func readResult(_ reader: inout WireReader) throws(WireFormatError) -> ItemQueryResult {
        let reference = try reader.readSized(maximum: 256)
        guard let itemClass = ItemClass(rawValue: try reader.readUInt32()),
            let accessibility = Accessibility(rawValue: try reader.readUInt8()),
            let kind = ValueKind(rawValue: try reader.readUInt8())
        else { throw WireFormatError("Unknown item class, accessibility or kind") }
        let keyRecord = try reader.readSized(maximum: 16)
        guard keyRecord.count == 16 else { throw WireFormatError("A key record ID is not 16 bytes") }
        let value: [UInt8]? =
            switch try reader.readUInt8() {
            case 0: nil
            case 1: try readValue(&reader)
            default: throw WireFormatError("Bad value flag")
            }
        let attributes = try HolderRequest.readAttributes(&reader)
        return ItemQueryResult(
            reference: reference, itemClass: itemClass, attributes: attributes, accessibility: accessibility,
            kind: kind, value: value, keyRecord: keyRecord)
    }

    private static func readValue(_ reader: inout WireReader) throws(WireFormatError) -> [UInt8] {
        let count = Int(try reader.readUInt32())
        guard count <= ItemValue.maximumSize else { throw WireFormatError("A value over the limit") }
        return try reader.readBytes(count)
    }
}
