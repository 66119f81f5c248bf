import SystemCalls

/// Key records read and authenticated, by record ID: a record never changes once written.
final class KeyRecordCache: Sendable {
    private let records = Locked<[[UInt8]: KeyRecord]>([:])

    func record(_ id: [UInt8]) -> KeyRecord? {
        records.withLock { $0[id] }
    }

    func remember(_ record: KeyRecord, id: [UInt8]) {
        records.withLock { $0[id] = record }
    }

    func removeAll() {
        records.withLock { $0 = [:] }
    }
}
