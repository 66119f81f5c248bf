import Foundation
import Passkeys
import SystemCalls
import TPMKeychain
import TPMKeychainTesting
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// The UHID transport with the kernel's side played by the test over a SOCK_SEQPACKET pair (one
/// event per packet, as /dev/uhid reads and writes them): this machine's kernel has no
/// /dev/uhid, so what is checked is the event ABI, against the kernel's own header compiled by
/// cc, and the conversation a host has through it. A kernel that has UHID is not exercised here.
@Suite("the passkey authenticator as a UHID device", .serialized)
struct UHIDTests {
    /// linux/uhid.h's sizes and offsets, as the C compiler lays them out.
    static func kernelLayout() throws -> [String: Int] {
        let directory = NSTemporaryDirectory() + "uhid-layout-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let source = """
            #include <linux/uhid.h>
            #include <stddef.h>
            #include <stdio.h>
            int main(void) {
                printf("size %zu\\n", sizeof(struct uhid_event));
                printf("rd_size %zu\\n", offsetof(struct uhid_event, u.create2.rd_size));
                printf("vendor %zu\\n", offsetof(struct uhid_event, u.create2.vendor));
                printf("rd_data %zu\\n", offsetof(struct uhid_event, u.create2.rd_data));
                printf("input_size %zu\\n", offsetof(struct uhid_event, u.input2.size));
                printf("input_data %zu\\n", offsetof(struct uhid_event, u.input2.data));
                printf("output_size %zu\\n", offsetof(struct uhid_event, u.output.size));
                printf("create2 %d input2 %d output %d\\n", UHID_CREATE2, UHID_INPUT2, UHID_OUTPUT);
                return 0;
            }
            """
        try source.write(toFile: directory + "/layout.c", atomically: true, encoding: .utf8)
        for (tool, arguments) in [
            ("/usr/bin/cc", [directory + "/layout.c", "-o", directory + "/layout"]), (directory + "/layout", []),
        ] {
            let process = Process()
            process.executableURL = URL(fileURLWithPath: tool)
            process.arguments = arguments
            let output = Pipe()
            process.standardOutput = output
            try process.run()
            let data = output.fileHandleForReading.readDataToEndOfFile()
            process.waitUntilExit()
            #expect(process.terminationStatus == 0, "\(tool)")
            if arguments.isEmpty {
                var values: [String: Int] = [:]
                for word in String(decoding: data, as: UTF8.self).split(whereSeparator: \.isWhitespace).chunked(2) {
                    values[String(word[0])] = Int(word[1])
                }
                return values
            }
        }
        return [:]
    }

    @Test("the events are laid out as linux/uhid.h lays them out")
    func eventLayout() throws {
        let layout = try Self.kernelLayout()
        #expect(layout["size"] == UHIDEvents.size, "\(layout)")
        let create = UHIDEvents.create(name: "x", vendor: 0x1234, product: 0x5678)
        let rdSize = try #require(layout["rd_size"])
        #expect(Int(create[rdSize]) | Int(create[rdSize + 1]) << 8 == UHIDEvents.fidoReportDescriptor.count)
        let vendor = try #require(layout["vendor"])
        #expect(Array(create[vendor..<vendor + 2]) == [0x34, 0x12])
        let data = try #require(layout["rd_data"])
        #expect(Array(create[data..<data + UHIDEvents.fidoReportDescriptor.count]) == UHIDEvents.fidoReportDescriptor)
        #expect(Int(create[0]) == layout["create2"])
        let input = UHIDEvents.input([UInt8](repeating: 7, count: 64))
        let inputSize = try #require(layout["input_size"])
        let inputData = try #require(layout["input_data"])
        #expect(Int(input[0]) == layout["input2"] && Int(input[inputSize]) == 64)
        #expect(input[inputData] == 7)
        // An output event as the kernel writes it: the report number 0, then the report.
        var output = [UInt8](repeating: 0, count: UHIDEvents.size)
        let outputType = try #require(layout["output"])
        let outputSize = try #require(layout["output_size"])
        output[0] = UInt8(outputType)
        output[5...68] = ArraySlice([UInt8](repeating: 9, count: 64))
        output[outputSize] = 65
        #expect(UHIDEvents.parse(output) == .output([UInt8](repeating: 9, count: 64)))
    }

    @Test(
        "a host through the device: the FIDO report descriptor at creation, INIT, a CBOR getInfo cut into reports, a feature report refused, and the end when the kernel side closes"
    )
    func conversation() throws {
        let simulator = try SoftwareTPM.start()
        defer { simulator.stop() }
        let directory = NSTemporaryDirectory() + "tpm-keychain-uhid-" + UUID().uuidString
        try FileManager.default.createDirectory(
            atPath: directory, withIntermediateDirectories: false, attributes: [.posixPermissions: 0o700])
        defer { try? FileManager.default.removeItem(atPath: directory) }
        var location = try KeychainLocation(path: directory + "/store", tcti: simulator.tcti)
        location.deviceDirectory = directory + "/device"
        try location.createStore()
        defer { Keychain.closeStore(location) }

        var pair: [Int32] = [0, 0]
        #expect(socketpair(AF_UNIX, Int32(SOCK_SEQPACKET.rawValue), 0, &pair) == 0)
        let kernel = pair[1]
        let device = try UHIDAuthenticator(
            descriptor: pair[0], authenticator: PasskeyAuthenticator(.init(location: location, presence: { _ in true }))
        )
        func readEvent() -> [UInt8] {
            var event = [UInt8](repeating: 0, count: UHIDEvents.size + 16)
            let count = event.withUnsafeMutableBytes { read(kernel, $0.baseAddress, $0.count) }
            return count > 0 ? Array(event[0..<count]) : []
        }
        func writeEvent(_ type: UHIDEvents.EventType, _ body: (inout [UInt8]) -> Void = { _ in }) {
            var event = [UInt8](repeating: 0, count: UHIDEvents.size)
            event[0] = UInt8(type.rawValue)
            body(&event)
            _ = event.withUnsafeBytes { write(kernel, $0.baseAddress, $0.count) }
        }
        func sendReport(_ report: [UInt8]) {
            writeEvent(.output) { event in
                event[5..<69] = ArraySlice(report)
                event[4 + 4096] = 65
            }
        }
        func input(_ event: [UInt8]) -> [UInt8] {
            guard event.count == UHIDEvents.size, event[0] == UInt8(UHIDEvents.EventType.input2.rawValue),
                Int(event[4]) | Int(event[5]) << 8 == 64
            else { return [] }
            return Array(event[6..<70])
        }

        let create = readEvent()
        #expect(create.count == UHIDEvents.size && create[0] == UInt8(UHIDEvents.EventType.create2.rawValue))
        #expect(String(decoding: create[4..<24], as: UTF8.self).hasPrefix("TPMKeychain passkeys"))
        let thread = try JoinableThread { device.serve() }

        writeEvent(.start)
        writeEvent(.open)
        let nonce: [UInt8] = [1, 2, 3, 4, 5, 6, 7, 8]
        sendReport(CTAPHIDChannels.frames(channel: CTAPHIDChannels.broadcast, command: 0x06, payload: nonce)[0])
        let initReply = input(readEvent())
        #expect(
            Array(initReply.prefix(7)) == [0xFF, 0xFF, 0xFF, 0xFF, 0x86, 0, 17] && Array(initReply[7..<15]) == nonce)
        let channel =
            UInt32(initReply[15]) << 24 | UInt32(initReply[16]) << 16 | UInt32(initReply[17]) << 8
            | UInt32(initReply[18])

        for report in CTAPHIDChannels.frames(channel: channel, command: 0x10, payload: [0x04]) { sendReport(report) }
        let first = input(readEvent())
        #expect(first.count == 64 && first[4] == 0x90, "a CBOR reply on the channel")
        let length = Int(first[5]) << 8 | Int(first[6])
        var payload = Array(first[7..<min(64, 7 + length)])
        while payload.count < length { payload += input(readEvent())[5..<min(64, 5 + length - payload.count)] }
        #expect(payload.first == 0)
        let info = try CBOR(decoding: Array(payload.dropFirst()))
        #expect(info[1]?.arrayValue?.contains(.text("FIDO_2_1")) == true, "\(info)")

        writeEvent(.getReport) { event in event[4] = 7 }
        let refusal = readEvent()
        #expect(refusal[0] == UInt8(UHIDEvents.EventType.getReportReply.rawValue) && refusal[4] == 7 && refusal[8] == 5)

        close(kernel)
        thread.join()
    }
}

extension Array {
    fileprivate func chunked(_ size: Int) -> [[Element]] {
        stride(from: 0, to: count - count % size, by: size).map { Array(self[$0..<$0 + size]) }
    }
}
