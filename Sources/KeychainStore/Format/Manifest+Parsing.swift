import Crypto
import FoundationEssentials
import KeychainVocabulary
import TPM
import WireFormat

// Reading a manifest: parsing its records under their MAC chain, applying them to a state, and
// the compacted form a writer replaces it with.
extension Manifest {
    /// Parses a whole manifest. Records after the first one that fails its MAC are not read: a
    /// writer that died mid-append leaves a torn record, which the next writer overwrites.
    ///
    /// - Throws: ``KeychainError`` `.tampered` when the header is missing, fails its MAC or names
    ///   another store or counter.
    static func parse(
        _ bytes: [UInt8], key: SymmetricKey, storeID: [UInt8], counterIndex: UInt32, path: String
    ) throws(KeychainError) -> State {
        guard bytes.count >= recordSize else {
            throw KeychainError(.tampered, "\(path) is truncated: the store's manifest has no header")
        }
        let zero = [UInt8](repeating: 0, count: 16)
        let headerBody = Array(bytes[0..<48])
        guard constantTimeEqual(mac(headerBody, after: zero, key: key), bytes[48..<64]),
            headerBody[0] == Kind.header.rawValue,
            headerBody[1] == version, Array(headerBody[2..<6]) == magic
        else {
            throw KeychainError(
                .tampered, "\(path) failed authentication: the store's manifest was modified or belongs to another key")
        }
        let expected = Record.header(storeID: storeID, counterIndex: counterIndex, highWater: 0).name
        guard Array(headerBody[16..<48]) == expected else {
            throw KeychainError(.tampered, "\(path) belongs to another store or counter")
        }
        var state = State(
            storeID: storeID, counterIndex: counterIndex, highWater: integer(headerBody, at: 8),
            lastMAC: Array(bytes[48..<64]), validSize: recordSize)
        if let error = apply(bytes[recordSize...], at: recordSize, to: &state, macs: RecordMAC(key: key), path: path) {
            throw error
        }
        return state
    }

    /// Applies the records in `bytes`, which start at file offset `offset`, stopping at the first
    /// that does not authenticate. Nothing is applied unless `offset` is where `state` ended (the
    /// same tail applied twice, by two threads that both read it, counts once). Mutates `state`
    /// in place: callers keep it uniquely referenced, so a large manifest is not copied per write.
    ///
    /// - Returns: an error for a second header (a spliced file); nil otherwise.
    ///
    /// `encodedAfter` is given for bytes that ``encode(_:after:macs:)`` just returned to this
    /// process, chained after that MAC: when it is still `state`'s last MAC, their MACs are taken
    /// as they are instead of being computed a second time. Bytes read from the file are always
    /// checked.
    static func apply(
        _ bytes: ArraySlice<UInt8>, at offset: Int, to state: inout State, macs: RecordMAC, path: String,
        encodedAfter: [UInt8]? = nil
    ) -> KeychainError? {
        guard offset == state.validSize else { return nil }
        let encodedHere = encodedAfter == state.lastMAC
        state.entries.reserveCapacity(state.entries.count + bytes.count / recordSize)
        // Records of one group share its name: formatted once per run of them, not per record,
        // and not at all when the item's entry already has it (an item's group never changes:
        // its file name keys its whole primary key).
        var lastGroup: (bytes: ArraySlice<UInt8>, name: String) = ([], "")
        func groupName(_ bytes: ArraySlice<UInt8>, known: String?) -> String {
            if let known, Self.hexEqual(known, bytes) { return known }
            if bytes.elementsEqual(lastGroup.bytes) { return lastGroup.name }
            lastGroup = (bytes, Array(bytes).hexString)
            return lastGroup.name
        }
        var position = bytes.startIndex
        while position + recordSize <= bytes.endIndex {
            let body = Array(bytes[position..<position + 48])
            let recordMAC: [UInt8]
            if encodedHere {
                recordMAC = Array(bytes[position + 48..<position + 64])
            } else {
                recordMAC = macs.mac(body[...], after: state.lastMAC)
                guard constantTimeEqual(recordMAC, bytes[position + 48..<position + 64]) else { break }
            }
            guard body[1] == version, let kind = Kind(rawValue: body[0]) else { break }
            let value = integer(body, at: 8)
            switch kind {
            case .header:
                return KeychainError(.tampered, "\(path) has a second header: the store's manifest was spliced")
            case .epoch:
                state.epoch = value
            case .writing:
                let key = ItemKey(body[32..<48])
                var entry =
                    state.entries[key]
                    ?? Entry(generation: 0, live: false, group: groupName(body[16..<32], known: nil), finished: true)
                entry.pending = value
                state.entries[key] = entry
                state.highWater = max(state.highWater, value)
            case .set, .deleting, .deleted:
                let key = ItemKey(body[32..<48])
                let group = groupName(body[16..<32], known: state.entries[key]?.group)
                let entry = Entry(generation: value, live: kind == .set, group: group, finished: kind == .deleted)
                if let old = state.entries.updateValue(entry, forKey: key), old.live {
                    state.liveCount -= 1
                }
                if entry.live { state.liveCount += 1 }
                state.highWater = max(state.highWater, value)
            }
            state.lastMAC = recordMAC
            position += recordSize
            state.validSize = offset + (position - bytes.startIndex)
        }
        return nil
    }

    /// A compacted manifest holding `state`'s live entries and its epoch.
    static func compacted(_ state: State, key: SymmetricKey) -> [UInt8] {
        var records = [
            Record.header(storeID: state.storeID, counterIndex: state.counterIndex, highWater: state.highWater)
        ]
        // Finished deletes go (the high-water mark covers them); one not known to be finished
        // stays, and so does a write not known to be finished.
        for (key, entry) in state.entries.sorted(by: { ($0.key.high, $0.key.low) < ($1.key.high, $1.key.low) })
        where entry.live || !entry.finished || entry.pending != nil {
            let path = ItemPath(group: entry.group, file: key.fileName)
            if entry.live || !entry.finished,
                let record = Record.item(entry.live ? .set : .deleting, path, generation: entry.generation)
            {
                records.append(record)
            }
            if let pending = entry.pending, let record = Record.item(.writing, path, generation: pending) {
                records.append(record)
            }
        }
        records.append(Record(kind: .epoch, value: state.epoch))
        return encode(records, after: [UInt8](repeating: 0, count: 16), key: key)
    }

    private static let hexDigits = Array("0123456789abcdef".utf8)

    /// Whether `hex` is the lower-case hex of `bytes`, compared without formatting them.
    private static func hexEqual(_ hex: String, _ bytes: ArraySlice<UInt8>) -> Bool {
        var utf8 = hex.utf8.makeIterator()
        for byte in bytes {
            guard utf8.next() == hexDigits[Int(byte >> 4)], utf8.next() == hexDigits[Int(byte & 0x0F)] else {
                return false
            }
        }
        return utf8.next() == nil
    }

    private static func integer(_ bytes: [UInt8], at offset: Int) -> UInt64 {
        var value: UInt64 = 0
        for index in offset..<offset + 8 { value = value << 8 | UInt64(bytes[index]) }
        return value
    }
}
