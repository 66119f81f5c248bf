/// Where CTAPHID reports come from and go to: a Unix socket carrying them as they are, or the
/// kernel's UHID device.
protocol CTAPHIDTransport {
    /// The next 64-byte report from the host; `timeout` milliseconds for it to begin (-1: none).
    mutating func readReport(timeout: Int32) -> CTAPHIDReadOutcome
    /// Sends reports to the host; false when it is gone.
    mutating func send(_ reports: [[UInt8]]) -> Bool
}

enum CTAPHIDReadOutcome {
    case report([UInt8])
    case timedOut
    case closed
}

/// One host's conversation with the authenticator over CTAPHID, whatever carries the reports:
/// the framing (``CTAPHIDChannels``), then each complete request answered (CBOR to the
/// authenticator, PING echoed, WINK acknowledged, U2F's MSG refused).
enum CTAPHIDSession {
    /// How long a half-sent message waits for its next report (CTAPHID's transaction timeout).
    static let continuationTimeout: Int32 = 3_000

    /// Serves `transport` until the host is gone.
    static func run(
        _ transport: inout some CTAPHIDTransport, authenticator: PasskeyAuthenticator,
        requester: PasskeyAuthenticator.Requester
    ) {
        var channels = CTAPHIDChannels()
        while true {
            let report: [UInt8]
            switch transport.readReport(timeout: channels.isAssembling ? continuationTimeout : -1) {
            case .report(let bytes): report = bytes
            case .timedOut:
                guard transport.send(channels.timeOut()) else { return }
                continue
            case .closed: return
            }
            switch channels.receive(report) {
            case .none: continue
            case .reply(let reports): guard transport.send(reports) else { return }
            case .request(let request):
                guard transport.send(respond(to: request, authenticator: authenticator, requester: requester)) else {
                    return
                }
            }
        }
    }

    static func respond(
        to request: CTAPHIDChannels.Request, authenticator: PasskeyAuthenticator,
        requester: PasskeyAuthenticator.Requester
    ) -> [[UInt8]] {
        typealias Command = CTAPHIDChannels.Command
        switch Command(rawValue: request.command) {
        case .ping:
            return CTAPHIDChannels.frames(channel: request.channel, command: request.command, payload: request.payload)
        case .cbor:
            let response = authenticator.respond(to: request.payload, from: requester)
            return CTAPHIDChannels.frames(channel: request.channel, command: request.command, payload: response)
        case .wink:
            return CTAPHIDChannels.frames(channel: request.channel, command: request.command, payload: [])
        case .cancel:
            // Commands run to their end before the next report is read: nothing is left to cancel.
            return []
        default:
            return CTAPHIDChannels.error(.invalidCommand, channel: request.channel)
        }
    }
}
