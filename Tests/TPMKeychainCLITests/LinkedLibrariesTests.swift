import Foundation
import Testing

/// The binaries that start often or stay resident (the lookup CLI, the git helper, the Secret
/// Service daemon, the ssh agent, the passkey authenticator) link `FoundationEssentials` and not
/// Foundation proper, which brings CoreFoundation and ICU's data: 34 MB on disk in a static
/// binary, and megabytes of resident memory in a daemon (docs/ARCHITECTURE.md, "No Foundation
/// string machinery"). The compiler holds the line only where a module imports
/// `FoundationEssentials`; one `import Foundation` anywhere in a binary's modules links it all
/// again, and this test sees it: the debug build links the Swift libraries dynamically, so each
/// one a binary's modules import is a NEEDED entry of its dynamic section.
@Suite("the resident and lookup binaries link no Foundation proper")
struct LinkedLibrariesTests {
    static let binaries = [
        "tpm-keychain", "git-credential-tpm-keychain", "tpm-keychain-secret-service", "tpm-keychain-ssh-agent",
        "tpm-keychain-passkeys",
    ]

    /// Foundation proper and what only it brings.
    static let refused = ["libFoundation.so", "libFoundationInternationalization.so", "lib_FoundationICU.so"]

    @Test("NEEDED has FoundationEssentials and none of Foundation proper", arguments: binaries)
    func linksNoFoundationProper(binary: String) throws {
        let path = URL(fileURLWithPath: CLI.executable).deletingLastPathComponent().appendingPathComponent(binary).path
        let needed = try Self.neededLibraries(of: path)
        // The control: a binary whose NEEDED list could not be read would pass the check below.
        #expect(needed.contains("libFoundationEssentials.so"), "\(binary) needs \(needed)")
        #expect(needed.filter(Self.refused.contains).isEmpty, "\(binary) needs \(needed)")
    }

    /// The shared libraries `path`'s dynamic section names, as `readelf -d` prints them.
    static func neededLibraries(of path: String) throws -> [String] {
        guard FileManager.default.isExecutableFile(atPath: path) else {
            throw CLIError("\(path) is not there: run swift build --build-tests")
        }
        let readelf = Process()
        readelf.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        readelf.arguments = ["readelf", "--dynamic", "--wide", path]
        let output = Pipe()
        readelf.standardOutput = output
        try readelf.run()
        let text = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        readelf.waitUntilExit()
        guard readelf.terminationStatus == 0 else { throw CLIError("readelf -d \(path) failed: \(text)") }
        // "0x0000000000000001 (NEEDED)  Shared library: [libFoundationEssentials.so]"
        return text.split(separator: "\n").filter { $0.contains("(NEEDED)") }.compactMap { line in
            guard let open = line.firstIndex(of: "["), let close = line.lastIndex(of: "]") else { return nil }
            return String(line[line.index(after: open)..<close])
        }
    }
}
