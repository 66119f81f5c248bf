import Foundation
import SystemCalls
import Testing

@testable import TPMKeychainTesting
@testable import TPMSimulator

@Suite("RecordingTPMProxy")
struct RecordingTPMProxyTests {
    @Test("a latency profile holds each command back by at least its cost, and names it")
    func latencyProfileDelaysCommands() throws {
        let tpm = try SoftwareTPM.start()
        defer { tpm.stop() }
        let getRandom: UInt32 = 0x17B
        // Only GetRandom is slowed, so the bound below is about the commands counted, whatever
        // else the tool sends and however fast this machine is.
        let profile = TPMLatencyProfile(name: "test", defaultCost: .zero, costs: [getRandom: .milliseconds(300)])
        #expect(profile.cost(of: [getRandom, 0x165, getRandom]) == .milliseconds(600))
        let proxy = try RecordingTPMProxy.start(forwardingTo: tpm.port, latency: profile)
        defer { proxy.stop() }
        let start = ContinuousClock.now
        try runToolExpectingSuccess(["tpm2_getrandom", "8", "--hex"], tcti: proxy.tcti)
        let elapsed = ContinuousClock.now - start
        let sent = proxy.commandCodes.count { $0 == getRandom }
        #expect(sent >= 1)
        #expect(elapsed >= .milliseconds(300) * sent)
        #expect(proxy.commandNames.contains("GetRandom"))
        #expect(RecordingTPMProxy.commandName(0x15E) == "Unseal" && RecordingTPMProxy.commandName(0x999) == "0x999")
    }

    @Test("tpm2-tools work through the proxy, which counts and records their commands")
    func recordsToolTraffic() throws {
        let tpm = try SoftwareTPM.start()
        defer { tpm.stop() }
        let proxy = try RecordingTPMProxy.start(forwardingTo: tpm.port)
        defer { proxy.stop() }
        #expect(proxy.tcti == "swtpm:host=127.0.0.1,port=\(proxy.port)")
        #expect(proxy.port != tpm.port)

        for _ in 0..<3 {
            let output = try runToolExpectingSuccess(["tpm2_getrandom", "8", "--hex"], tcti: proxy.tcti)
            #expect(output.count == 16)
        }
        let getRandom: UInt32 = 0x17B
        #expect(proxy.commandCodes.count { $0 == getRandom } == 3)
        #expect(proxy.commandCount == proxy.commandCodes.count)
        #expect(proxy.commandCount >= 3)
        let bytes = proxy.recordedBytes()
        #expect(bytes.firstRange(of: [0x00, 0x00, 0x01, 0x7B]) != nil)
        // Both directions: the GetRandom responses are in the record too (tag 0x8001, size 0x14).
        #expect(bytes.firstRange(of: [0x80, 0x01, 0x00, 0x00, 0x00, 0x14, 0x00, 0x00, 0x00, 0x00]) != nil)

        proxy.reset()
        #expect(proxy.commandCount == 0)
        #expect(proxy.recordedBytes().isEmpty)
        try runToolExpectingSuccess(["tpm2_getcap", "handles-transient"], tcti: proxy.tcti)
        #expect(proxy.commandCount >= 1)
        #expect(!proxy.commandCodes.contains(getRandom))

        proxy.stop()
        proxy.stop()
        // The proxy is gone; the TPM itself still serves clients.
        #expect(try runTool(["tpm2_getrandom", "8"], tcti: proxy.tcti).status != 0)
        try runToolExpectingSuccess(["tpm2_getrandom", "8", "--hex"], tcti: tpm.tcti)
    }

    @Test("stop wakes threads blocked on an idle client connection")
    func stopWithIdleClient() throws {
        let tpm = try SoftwareTPM.start()
        defer { tpm.stop() }
        let proxy = try RecordingTPMProxy.start(forwardingTo: tpm.port)
        let client = try LoopbackSocket.connectTCP(host: "127.0.0.1", port: proxy.port, timeout: .seconds(5))
        defer { closeDescriptor(client) }
        try LoopbackSocket.sendAll(client, RandomNumberGeneratorCommands.getRandom(byteCount: 4))
        let header = try LoopbackSocket.receiveExactly(client, count: 10)
        #expect(Array(header[6..<10]) == [0, 0, 0, 0])
        _ = try LoopbackSocket.receiveExactly(client, count: 6)
        #expect(proxy.commandCodes == [0x17B])

        proxy.stop() // must return although the client keeps its connection open
        #expect(try LoopbackSocket.receive(client, maximum: 16).isEmpty)
    }

    @Test("the command parser follows commands however TCP splits them")
    func parserHandlesArbitrarySplits() {
        let stream = StartupCommandsBytes.all
        for split in 1...stream.count {
            var parser = CommandStreamParser()
            var codes: [UInt32] = []
            var index = 0
            while index < stream.count {
                let end = min(index + split, stream.count)
                codes += parser.consume(stream[index..<end])
                index = end
            }
            #expect(codes == [0x145, 0x17B, 0x139], "chunk size \(split)")
        }
    }
}

/// Shutdown, GetRandom and DictionaryAttackLockReset back to back (12 + 12 + 27 bytes).
private enum StartupCommandsBytes {
    static let all: [UInt8] =
        [0x80, 0x01, 0, 0, 0, 0x0C, 0, 0, 0x01, 0x45, 0, 0]
        + [0x80, 0x01, 0, 0, 0, 0x0C, 0, 0, 0x01, 0x7B, 0, 8]
        + [0x80, 0x02, 0, 0, 0, 27, 0, 0, 0x01, 0x39, 0x40, 0, 0, 0x0A, 0, 0, 0, 9, 0x40, 0, 0, 0x09, 0, 0, 0, 0, 0]
}
