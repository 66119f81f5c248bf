/// CTAPHID (CTAP 2.1 §11.2): messages cut into 64-byte reports on numbered channels. This type
/// owns one transport connection's framing state: which channels it allocated, and the one
/// message being assembled. It turns reports into complete requests or error replies, and
/// replies into reports; it never runs a command itself.
///
/// A report is `CID(4) ‖ CMD|0x80 ‖ BCNT(2, big-endian) ‖ 57 data bytes` for a message's first
/// (init) packet, `CID(4) ‖ SEQ(0…127) ‖ 59 data bytes` for each continuation.
package struct CTAPHIDChannels: Sendable {
    package static let reportSize = 64
    package static let broadcast: UInt32 = 0xFFFF_FFFF
    /// The longest message 128 continuations carry.
    package static let maximumMessage = 57 + 128 * 59

    package enum Command: UInt8, Sendable {
        case ping = 0x01
        case msg = 0x03
        case lock = 0x04
        case initialize = 0x06
        case wink = 0x08
        case cbor = 0x10
        case cancel = 0x11
        case keepalive = 0x3B
        case error = 0x3F
    }

    package enum ErrorCode: UInt8, Sendable {
        case invalidCommand = 0x01
        case invalidParameter = 0x02
        case invalidLength = 0x03
        case invalidSequence = 0x04
        case timeout = 0x05
        case channelBusy = 0x06
        case lockRequired = 0x0A
        case invalidChannel = 0x0B
        case other = 0x7F
    }

    /// A complete request for the authenticator.
    package struct Request: Equatable, Sendable {
        package let channel: UInt32
        package let command: UInt8
        package let payload: [UInt8]
    }

    /// What a report leads to.
    package enum Outcome: Equatable, Sendable {
        /// Nothing yet (a continuation is awaited, or the report is ignored).
        case none
        /// Reports to send back at once (an INIT's answer, or an error).
        case reply([[UInt8]])
        case request(Request)
    }

    private var allocated: Set<UInt32> = []
    private var nextChannel: UInt32 = 1
    private var assembling: (channel: UInt32, command: UInt8, expected: Int, payload: [UInt8], sequence: UInt8)?
    /// The device's version in INIT replies: major, minor, build.
    private let deviceVersion: [UInt8]

    package init(deviceVersion: [UInt8] = [1, 0, 0]) {
        self.deviceVersion = deviceVersion
    }

    /// Whether a message is half received (its continuations are awaited).
    package var isAssembling: Bool { assembling != nil }

    /// Drops a half-received message: its sender went quiet (CTAPHID's transaction timeout).
    package mutating func timeOut() -> [[UInt8]] {
        guard let pending = assembling else { return [] }
        assembling = nil
        return Self.error(.timeout, channel: pending.channel)
    }

    package mutating func receive(_ report: [UInt8]) -> Outcome {
        guard report.count == Self.reportSize else { return .none }
        let channel = UInt32(report[0]) << 24 | UInt32(report[1]) << 16 | UInt32(report[2]) << 8 | UInt32(report[3])
        let marker = report[4]
        guard marker & 0x80 != 0 else { return continuation(channel, sequence: marker, report) }
        let command = marker & 0x7F
        let length = Int(report[5]) << 8 | Int(report[6])
        if channel == 0 { return .reply(Self.error(.invalidChannel, channel: channel)) }
        if command == Command.initialize.rawValue {
            // INIT resynchronizes: whatever this channel was assembling is dropped.
            if assembling?.channel == channel { assembling = nil }
            guard channel == Self.broadcast || allocated.contains(channel) else {
                return .reply(Self.error(.invalidChannel, channel: channel))
            }
            guard length == 8 else { return .reply(Self.error(.invalidLength, channel: channel)) }
            return .reply(initialize(channel, nonce: Array(report[7..<15])))
        }
        guard channel != Self.broadcast, allocated.contains(channel) else {
            return .reply(Self.error(.invalidChannel, channel: channel))
        }
        if let pending = assembling {
            if pending.channel != channel { return .reply(Self.error(.channelBusy, channel: channel)) }
            // A new message on a channel still sending one: both are dropped.
            assembling = nil
            return .reply(Self.error(.invalidSequence, channel: channel))
        }
        guard length <= Self.maximumMessage else { return .reply(Self.error(.invalidLength, channel: channel)) }
        let first = Array(report[7..<min(7 + length, Self.reportSize)])
        if first.count == length { return .request(Request(channel: channel, command: command, payload: first)) }
        assembling = (channel, command, length, first, 0)
        return .none
    }

    private mutating func continuation(_ channel: UInt32, sequence: UInt8, _ report: [UInt8]) -> Outcome {
        // A continuation with no message begun, or of another channel's, is ignored (§11.2.8).
        guard var pending = assembling, pending.channel == channel else { return .none }
        guard sequence == pending.sequence else {
            assembling = nil
            return .reply(Self.error(.invalidSequence, channel: channel))
        }
        let wanted = min(pending.expected - pending.payload.count, Self.reportSize - 5)
        pending.payload += report[5..<5 + wanted]
        pending.sequence += 1
        if pending.payload.count == pending.expected {
            assembling = nil
            return .request(Request(channel: channel, command: pending.command, payload: pending.payload))
        }
        assembling = pending
        return .none
    }

    /// INIT: on the broadcast channel, a new channel; on an allocated one, the same (a resync).
    private mutating func initialize(_ channel: UInt32, nonce: [UInt8]) -> [[UInt8]] {
        var assigned = channel
        if channel == Self.broadcast {
            assigned = nextChannel
            nextChannel = nextChannel % 0xFFFF_FFFE + 1
            // A long-lived connection does not grow without bound: the oldest channels go.
            if allocated.count >= 64 { allocated.remove(allocated.min() ?? assigned) }
            allocated.insert(assigned)
        }
        let capabilities: UInt8 = 0x04 | 0x08 // CBOR, and no MSG (U2F)
        let payload =
            nonce + [
                UInt8(assigned >> 24), UInt8((assigned >> 16) & 0xFF), UInt8((assigned >> 8) & 0xFF),
                UInt8(assigned & 0xFF),
            ]
            + [2] + deviceVersion + [capabilities]
        return Self.frames(channel: channel, command: Command.initialize.rawValue, payload: payload)
    }

    /// The reports of an error reply.
    package static func error(_ code: ErrorCode, channel: UInt32) -> [[UInt8]] {
        frames(channel: channel, command: Command.error.rawValue, payload: [code.rawValue])
    }

    /// `payload` cut into reports for `channel`.
    package static func frames(channel: UInt32, command: UInt8, payload: [UInt8]) -> [[UInt8]] {
        let id = [
            UInt8(channel >> 24), UInt8((channel >> 16) & 0xFF), UInt8((channel >> 8) & 0xFF), UInt8(channel & 0xFF),
        ]
        var reports: [[UInt8]] = []
        var first = id + [command | 0x80, UInt8(payload.count >> 8), UInt8(payload.count & 0xFF)]
        first += payload.prefix(57)
        reports.append(first + [UInt8](repeating: 0, count: reportSize - first.count))
        var offset = min(57, payload.count)
        var sequence: UInt8 = 0
        while offset < payload.count {
            var next = id + [sequence]
            next += payload[offset..<min(offset + 59, payload.count)]
            reports.append(next + [UInt8](repeating: 0, count: reportSize - next.count))
            offset += 59
            sequence += 1
        }
        return reports
    }
}
