import Foundation
import SystemCalls
import TPMKeychainTesting
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// The mocks' children run beside TPM tests in the same process. libtss2's swtpm TCTI opens each
/// command's socket without SOCK_CLOEXEC; a child spawned in that window and keeping a copy holds
/// swtpm's single command connection open, and the test's next TPM command is never answered.
@Suite("children of the test mocks")
struct InheritedDescriptorTests {
    @Test(
        "A child the mocks spawn while a TSS-style socket is open does not keep it: swtpm answers the next connection"
    )
    func spawnedChildDoesNotHoldTheTPMConnection() throws {
        let simulator = try SoftwareTPM.start()
        defer { simulator.stop() }
        // As the TCTI does: connect without CLOEXEC, one command, its response.
        let socket = try Self.connectInheritably(port: simulator.port)
        var closed = false
        defer { if !closed { close(socket) } }
        let getRandom: [UInt8] = [0x80, 0x01, 0, 0, 0, 12, 0, 0, 0x01, 0x7B, 0, 8]
        #expect(write(socket, getRandom, getRandom.count) == getRandom.count)
        var response = [UInt8](repeating: 0, count: 64)
        #expect(read(socket, &response, response.count) == 20)

        let directory = NSTemporaryDirectory() + "inherited-descriptor-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: false)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let child = try FprintdMock.spawn(
            "/bin/sleep", ["600"], environment: [], standardOutput: directory + "/sleep.out")
        defer { FprintdMock.killAndReap([child]) }
        #expect(FileManager.default.fileExists(atPath: "/proc/\(child)/fd/\(socket)") == false)

        close(socket)
        closed = true
        // swtpm takes the next connection only once the first is closed in every process; held,
        // this fails with commandChannelFailed after the simulator's command timeout.
        try simulator.resetDictionaryAttackLockout()
    }

    private static func connectInheritably(port: Int) throws -> Int32 {
        let fd = Glibc.socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw Errno.current }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let result = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        guard result == 0 else {
            let error = Errno.current
            close(fd)
            throw error
        }
        return fd
    }
}
