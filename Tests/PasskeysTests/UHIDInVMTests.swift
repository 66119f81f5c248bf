import Foundation
import SystemCalls
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// The UHID transport on a kernel that has UHID: Debian's, booted in QEMU
/// (Fixtures/passkeys/uhid-vm), since the machine the suite runs on may have none. Inside, the
/// authenticator is a HID device the kernel made from its report descriptor (hidraw, bound by
/// hid-generic), and real clients find and use it as they would a security key: libfido2's own
/// tools list it, read its getInfo and take an assertion that they verify against the credential's
/// public key; python-fido2 registers and asserts through hidraw, each answer verified by
/// py_webauthn. The VM runs the binaries of this build, over a read-only 9p view of this machine.
@Suite("the passkey authenticator as a HID device through the kernel's UHID, in a VM")
struct UHIDInVMTests {
    static let fixtures = AuthenticatorWithFidoClientTests.root.appendingPathComponent("Fixtures/passkeys").path
    static let kernel = AuthenticatorWithFidoClientTests.root.appendingPathComponent(".build/uhid-vm/kernel").path

    @Test(
        "libfido2 lists the device, reads getInfo and asserts; python-fido2 registers and asserts through hidraw; each answer verified",
        .enabled(if: geteuid() == 0, "needs root: QEMU exports this machine's root file system to the VM"))
    func realClientsThroughTheKernel() throws {
        let out = NSTemporaryDirectory() + "tpm-keychain-uhid-vm-" + UUID().uuidString
        try FileManager.default.createDirectory(
            atPath: out, withIntermediateDirectories: false, attributes: [.posixPermissions: 0o700])
        defer { try? FileManager.default.removeItem(atPath: out) }
        let binaries = URL(fileURLWithPath: AuthenticatorWithFidoClientTests.tool("tpm-keychain"))
            .deletingLastPathComponent().path
        try Data(
            """
            BIN=\(binaries)
            PYTHON=\(AuthenticatorWithFidoClientTests.python)
            FIXTURES=\(Self.fixtures)

            """.utf8
        ).write(to: URL(fileURLWithPath: out + "/vars"))

        let run = try ChildProcess.run(
            Self.fixtures + "/uhid-vm/run-in-vm.sh",
            arguments: [Self.kernel, out, Self.fixtures + "/uhid-vm/inside.sh"], standardError: .file(out + "/run.err"))
        func read(_ name: String) -> String {
            (try? String(contentsOfFile: out + "/" + name, encoding: .utf8)) ?? ""
        }
        let steps = read("inside.log")
        let context = "\(steps)\n\(read("run.err"))\nconsole:\n\(read("console.log").suffix(3000))"
        #expect(run.termination == .exited(0), "\(context)")
        // Each step of the script, with the status of its client.
        for step in ["list 0", "info 0", "python 0", "libfido2-assert 0", "libfido2-verify 0"] {
            #expect(steps.contains(step), "\(step): \(context)\n\(read("server.err"))")
        }
        // The kernel's device: the report descriptor made a FIDO HID device that hid-generic bound.
        #expect(read("uevent").contains("DRIVER=hid-generic"), "\(read("uevent"))")
        #expect(read("list").contains("vendor=0x1209, product=0x7d4b"), "\(read("list"))")
        let info = read("info")
        for expected in ["FIDO_2_1", "credProtect, hmac-secret", "pin protocols: 2"] {
            #expect(info.contains(expected), "\(expected): \(info)")
        }
        // python-fido2's registrations and assertions, as py_webauthn verified them.
        let last = read("python").split(separator: "\n").last.map(String.init) ?? ""
        let result = try #require(
            try? JSONSerialization.jsonObject(with: Data(last.utf8)) as? [String: Any], "\(read("python"))")
        #expect((result["registered"] as? [Any])?.count == 3, "\(result)")
        #expect((result["asserted"] as? [Any])?.count == 3, "\(result)")
        #expect((result["discovered"] as? [Any])?.count == 2, "\(result)")
        // libfido2 verified its assertion against the public key python-fido2's registration gave.
        #expect(read("verify-assert.err").isEmpty, "\(read("verify-assert.err"))")
    }
}
