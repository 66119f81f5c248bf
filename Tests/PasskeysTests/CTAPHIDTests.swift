import Testing

@testable import Passkeys

/// CTAPHID's framing on its own: channels, fragments and the errors CTAP 2.1 §11.2 names.
@Suite("CTAPHID framing")
struct CTAPHIDTests {
    static func initReport(_ channel: UInt32, _ command: UInt8, length: Int, _ data: [UInt8]) -> [UInt8] {
        let head = [
            UInt8(channel >> 24), UInt8((channel >> 16) & 0xFF), UInt8((channel >> 8) & 0xFF), UInt8(channel & 0xFF),
            command | 0x80, UInt8(length >> 8), UInt8(length & 0xFF),
        ]
        let report = head + data
        return report + [UInt8](repeating: 0, count: 64 - report.count)
    }

    static func continuation(_ channel: UInt32, _ sequence: UInt8, _ data: [UInt8]) -> [UInt8] {
        let report =
            [
                UInt8(channel >> 24), UInt8((channel >> 16) & 0xFF), UInt8((channel >> 8) & 0xFF),
                UInt8(channel & 0xFF), sequence,
            ]
            + data
        return report + [UInt8](repeating: 0, count: 64 - report.count)
    }

    /// A new channel, through INIT on the broadcast channel.
    static func allocate(_ channels: inout CTAPHIDChannels) throws -> UInt32 {
        let nonce: [UInt8] = [1, 2, 3, 4, 5, 6, 7, 8]
        guard case .reply(let reports) = channels.receive(initReport(CTAPHIDChannels.broadcast, 0x06, length: 8, nonce))
        else { throw CTAPHIDTestError() }
        let reply = reports[0]
        #expect(Array(reply[0..<4]) == [0xFF, 0xFF, 0xFF, 0xFF] && reply[4] == 0x86 && reply[6] == 17)
        #expect(Array(reply[7..<15]) == nonce, "the nonce comes back")
        #expect(reply[19] == 2 && reply[23] & 0x04 != 0, "protocol 2, CBOR capable")
        return UInt32(reply[15]) << 24 | UInt32(reply[16]) << 16 | UInt32(reply[17]) << 8 | UInt32(reply[18])
    }

    static func errorCode(_ outcome: CTAPHIDChannels.Outcome) -> UInt8? {
        guard case .reply(let reports) = outcome, reports.count == 1, reports[0][4] == 0xBF else { return nil }
        return reports[0][7]
    }

    @Test("a message cut into 64-byte reports comes back whole, and a reply is cut the same way")
    func fragments() throws {
        var channels = CTAPHIDChannels()
        let channel = try Self.allocate(&channels)
        let payload = (0..<1_000).map { UInt8($0 % 251) }
        let reports = CTAPHIDChannels.frames(channel: channel, command: 0x10, payload: payload)
        #expect(reports.count == 1 + (1_000 - 57 + 58) / 59 && reports.allSatisfy { $0.count == 64 })
        for report in reports.dropLast() { #expect(channels.receive(report) == .none) }
        #expect(
            channels.receive(reports.last!)
                == .request(CTAPHIDChannels.Request(channel: channel, command: 0x10, payload: payload)))
        #expect(!channels.isAssembling)
    }

    @Test(
        "wrong and broadcast channels, an interleaved channel, a sequence out of order, an oversized length and a timeout get CTAPHID's errors"
    )
    func errors() throws {
        var channels = CTAPHIDChannels()
        let channel = try Self.allocate(&channels)
        let other = try Self.allocate(&channels)
        #expect(channel != other)
        #expect(Self.errorCode(channels.receive(Self.initReport(0x1234_5678, 0x10, length: 1, [4]))) == 0x0B)
        #expect(Self.errorCode(channels.receive(Self.initReport(0, 0x10, length: 1, [4]))) == 0x0B)
        #expect(
            Self.errorCode(channels.receive(Self.initReport(CTAPHIDChannels.broadcast, 0x10, length: 1, [4]))) == 0x0B)
        #expect(Self.errorCode(channels.receive(Self.initReport(channel, 0x10, length: 8_000, []))) == 0x03)
        #expect(
            Self.errorCode(channels.receive(Self.initReport(CTAPHIDChannels.broadcast, 0x06, length: 4, [1, 2, 3, 4])))
                == 0x03)

        // A message begun on one channel: another channel is busy, a continuation of the other is ignored.
        #expect(
            channels.receive(Self.initReport(channel, 0x10, length: 100, [UInt8](repeating: 1, count: 57))) == .none)
        #expect(Self.errorCode(channels.receive(Self.initReport(other, 0x10, length: 1, [4]))) == 0x06)
        #expect(channels.receive(Self.continuation(other, 0, [9])) == .none)
        #expect(Self.errorCode(channels.receive(Self.continuation(channel, 1, [9]))) == 0x04, "sequence 1 before 0")
        #expect(!channels.isAssembling)

        // A new init on the same channel mid-message: INVALID_SEQ, and the channel works after.
        _ = channels.receive(Self.initReport(channel, 0x10, length: 100, [UInt8](repeating: 1, count: 57)))
        #expect(Self.errorCode(channels.receive(Self.initReport(channel, 0x01, length: 1, [7]))) == 0x04)
        #expect(
            channels.receive(Self.initReport(channel, 0x01, length: 2, [7, 8]))
                == .request(CTAPHIDChannels.Request(channel: channel, command: 0x01, payload: [7, 8])))

        // A sender that goes quiet mid-message: MSG_TIMEOUT, and nothing is half-kept.
        _ = channels.receive(Self.initReport(channel, 0x10, length: 100, [UInt8](repeating: 1, count: 57)))
        let timedOut = channels.timeOut()
        #expect(timedOut.count == 1 && timedOut[0][4] == 0xBF && timedOut[0][7] == 0x05)
        #expect(!channels.isAssembling)
        // A report that is not 64 bytes is not a report.
        #expect(channels.receive([1, 2, 3]) == .none)
    }

    @Test("an INIT on an allocated channel resynchronizes it: its half-received message is dropped")
    func resynchronize() throws {
        var channels = CTAPHIDChannels()
        let channel = try Self.allocate(&channels)
        _ = channels.receive(Self.initReport(channel, 0x10, length: 100, [UInt8](repeating: 1, count: 57)))
        guard
            case .reply(let reports) = channels.receive(
                Self.initReport(channel, 0x06, length: 8, [8, 7, 6, 5, 4, 3, 2, 1]))
        else {
            Issue.record("no INIT reply")
            return
        }
        #expect(Array(reports[0][15..<19]) == Array(reports[0][0..<4]), "the same channel")
        #expect(!channels.isAssembling)
    }
}

struct CTAPHIDTestError: Error {}
