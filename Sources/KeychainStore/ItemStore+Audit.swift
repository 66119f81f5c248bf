import Crypto
import FoundationEssentials
package import KeychainVocabulary
import SystemCalls
import WireFormat

#if canImport(Glibc)
import Glibc
#endif

// The store's audit trail (docs/FORMAT.md, "Audit trail"): `audit.log` in the store's root, one
// line per record, each carrying the first 128 bits of an HMAC over the previous record's and its
// own bytes under a key derived from the master key; and a head, the last record's number and
// MAC, kept as an item of the store (access group `tpm-keychain.audit`), which the manifest and
// the TPM's counter protect from being put back. An edited, inserted, reordered or removed record
// breaks the chain; a cut tail falls short of the head.
extension ItemStore {
    static let auditFileName = "audit.log"
    static let auditLockName = "audit.lock"
    /// The access group of the head item, which no face may name (AccessDecision).
    package static let auditAccessGroup = "tpm-keychain.audit"
    static let auditSequenceTag = FourCharacterCode("tkas")
    static let auditMACTag = FourCharacterCode("tkam")
    static let auditKeyInfo = Array("TPMKeychain audit".utf8)
    /// A record's text is at most this long: the caller's chain and labels are bounded before.
    package static let auditRecordLimit = 4096

    /// One record of the trail.
    package struct AuditRecord: Sendable, Equatable {
        package let sequence: UInt64
        /// Nanoseconds since 1970 (UTC).
        package let time: Int64
        package let text: String
        let mac: [UInt8]
    }

    /// What a check of the trail found.
    package struct AuditReading: Sendable {
        package let records: [AuditRecord]
        /// Why the trail cannot be trusted past `records`; nil when every record authenticates
        /// and the last is the head.
        package let problem: String?
    }

    private static var headPrimary: AttributeList {
        AttributeList(ItemIdentity(unchecked: auditAccessGroup, "audit", "head"))
    }

    /// Whether the store keeps an audit trail: its head exists (one file open).
    package func auditIsEnabled() throws(KeychainError) -> Bool {
        try item(.genericPassword, primary: Self.headPrimary, withSecret: false) != nil
    }

    /// Starts the trail: an empty log and a head at record 0. Already started: nothing changes.
    package func enableAudit() throws(KeychainError) {
        guard try !auditIsEnabled() else { return }
        let lock = try rootDirectory.lock(Self.auditLockName, timeout: lockTimeout)
        defer { withExtendedLifetime(lock) {} }
        try rootDirectory.replace(Self.auditFileName, with: [], durable: durable)
        try writeHead(sequence: 0, mac: [UInt8](repeating: 0, count: 16))
    }

    /// Stops the trail: the head goes (the log stays, for reading, until the store does).
    package func disableAudit() throws(KeychainError) {
        _ = try delete(.genericPassword, primary: Self.headPrimary)
    }

    /// Appends a record of `text` (one line: line breaks become spaces), durable before it
    /// returns. Does nothing when the trail is not started.
    ///
    /// - Throws: ``KeychainError`` `.tampered` when the log does not end where the head says,
    ///   `.timedOut`, `.storageFailed`.
    package func appendAudit(_ text: String) throws(KeychainError) {
        let line = String(text.map { $0.isNewline ? " " : $0 }.prefix(Self.auditRecordLimit))
        let lock = try rootDirectory.lock(Self.auditLockName, timeout: lockTimeout)
        defer { withExtendedLifetime(lock) {} }
        guard var head = try readHead() else { return }
        guard let file = try rootDirectory.openFile(Self.auditFileName, writable: true) else {
            throw KeychainError(
                .tampered, "\(root)/\(Self.auditFileName) is missing while its head names record \(head.sequence)")
        }
        let key = try auditKey()
        // A writer that died between its durable line and its head left one record past the
        // head: it is taken as the head first, when it chains from it.
        if let last = try lastRecord(of: file, key: key), last.record.sequence == head.sequence + 1,
            last.record.mac == Self.mac(key, previous: head.mac, last.record)
        {
            head = (last.record.sequence, last.record.mac)
            try writeHead(sequence: head.sequence, mac: head.mac)
        }
        var time = timespec()
        clock_gettime(CLOCK_REALTIME, &time)
        let partial = AuditRecord(
            sequence: head.sequence + 1, time: Int64(time.tv_sec) * 1_000_000_000 + Int64(time.tv_nsec), text: line,
            mac: [])
        let mac = Self.mac(key, previous: head.mac, partial)
        let record = AuditRecord(sequence: partial.sequence, time: partial.time, text: line, mac: mac)
        let bytes = Array(Self.encode(record).utf8)
        let end = try lastRecord(of: file, key: key)?.end ?? 0
        try file.write(bytes, at: end, durable: true)
        try writeHead(sequence: record.sequence, mac: mac)
    }

    /// Reads and checks the whole trail.
    ///
    /// - Throws: ``KeychainError`` `.itemNotFound` when the store keeps none, `.storageFailed`.
    package func readAudit() throws(KeychainError) -> AuditReading {
        guard let head = try readHead() else {
            throw KeychainError(
                .itemNotFound, "This keychain keeps no audit trail: tpm-keychain audit enable starts one")
        }
        guard let file = try rootDirectory.openFile(Self.auditFileName) else {
            return AuditReading(records: [], problem: "The log is missing; its head names record \(head.sequence)")
        }
        let key = try auditKey()
        let bytes = try file.read(count: file.size, at: 0)
        var records: [AuditRecord] = []
        var previous = [UInt8](repeating: 0, count: 16)
        let lines = bytes.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false)
        for (index, raw) in lines.enumerated() {
            if index == lines.count - 1 && raw.isEmpty { break }
            guard let record = Self.decode(raw), record.sequence == UInt64(records.count + 1),
                record.mac == Self.mac(key, previous: previous, record)
            else {
                let problem =
                    index == lines.count - 1
                    ? "Line \(index + 1) is incomplete or does not authenticate: the log was cut or edited there"
                    : "Record \(records.count + 1) (line \(index + 1)) does not authenticate: a record was edited, inserted, reordered or removed there"
                return AuditReading(records: records, problem: problem)
            }
            records.append(record)
            previous = record.mac
        }
        let last = records.last?.sequence ?? 0
        if last < head.sequence {
            return AuditReading(
                records: records,
                problem:
                    "The log ends at record \(last), but its head (kept in the store, rollback-protected) names record \(head.sequence): records were cut from its end"
            )
        }
        if last == head.sequence, last > 0, records.last?.mac != head.mac {
            return AuditReading(records: records, problem: "The last record is not the one its head names")
        }
        // One record past the head: a writer that died before writing its head; more is not.
        if last > head.sequence + 1 {
            return AuditReading(
                records: records, problem: "The log runs past its head by \(last - head.sequence) records")
        }
        return AuditReading(records: records, problem: nil)
    }

    // MARK: Parts

    private func readHead() throws(KeychainError) -> (sequence: UInt64, mac: [UInt8])? {
        guard let head = try item(.genericPassword, primary: Self.headPrimary, withSecret: false) else { return nil }
        guard let sequence = head.attributes[Self.auditSequenceTag], sequence.count == 8,
            let mac = head.attributes[Self.auditMACTag], mac.count == 16
        else {
            throw KeychainError(.tampered, "The audit trail's head in \(root) is damaged")
        }
        return (BigEndian.integer(sequence[...]), mac)
    }

    private func writeHead(sequence: UInt64, mac: [UInt8]) throws(KeychainError) {
        var primary = Self.headPrimary
        var encoded: [UInt8] = []
        BigEndian.append(sequence, to: &encoded)
        primary[Self.auditSequenceTag] = encoded
        primary[Self.auditMACTag] = mac
        try write(
            .genericPassword, primary: primary, mode: .upsert,
            value: ItemValue(kind: .data, bytes: [UInt8(ascii: "a")]),
            changes: AttributeChanges())
    }

    /// K_audit = HKDF-SHA256(K_manifest, storeID, "TPMKeychain audit"): derived when needed,
    /// since most stores keep no trail.
    func auditKey() throws(KeychainError) -> SymmetricKey {
        let state = try current()
        return OneBlockHKDF.deriveKey(
            inputKeyMaterial: state.keys.manifest, salt: storeID[...], info: Self.auditKeyInfo[...])
    }

    /// The last complete record of `file` and where it ends; nil for an empty log.
    private func lastRecord(
        of file: OpenFile, key: SymmetricKey
    ) throws(KeychainError) -> (record: AuditRecord, end: Int)? {
        guard file.size > 0 else { return nil }
        let window = min(file.size, 2 * Self.auditRecordLimit + 128)
        let tail = try file.read(count: window, at: file.size - window)
        guard let lastBreak = tail.lastIndex(of: UInt8(ascii: "\n")) else { return nil }
        let start = tail[..<lastBreak].lastIndex(of: UInt8(ascii: "\n")).map { $0 + 1 } ?? 0
        guard let record = Self.decode(tail[start..<lastBreak]) else { return nil }
        return (record, file.size - window + lastBreak + 1)
    }

    /// The bytes a record's MAC covers: its sequence, time and text as its line shows them.
    static func mac(_ key: SymmetricKey, previous: [UInt8], _ record: AuditRecord) -> [UInt8] {
        var message = previous
        message += Array("\(record.sequence) \(record.time) \(record.text)".utf8)
        return Array(HMAC<SHA256>.authenticationCode(for: message, using: key).prefix(16))
    }

    /// `<sequence> <time> <mac hex> <text>` and a line break.
    static func encode(_ record: AuditRecord) -> String {
        "\(record.sequence) \(record.time) \(record.mac.hexString) \(record.text)\n"
    }

    static func decode(_ line: ArraySlice<UInt8>) -> AuditRecord? {
        let fields = line.split(separator: UInt8(ascii: " "), maxSplits: 3, omittingEmptySubsequences: false)
        guard fields.count == 4, let sequence = UInt64(String(decoding: fields[0], as: UTF8.self)),
            let time = Int64(String(decoding: fields[1], as: UTF8.self)),
            let mac = [UInt8](hexString: String(decoding: fields[2], as: UTF8.self)), mac.count == 16
        else { return nil }
        return AuditRecord(sequence: sequence, time: time, text: String(decoding: fields[3], as: UTF8.self), mac: mac)
    }
}
