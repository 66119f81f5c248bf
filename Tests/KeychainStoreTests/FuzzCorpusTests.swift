import Foundation
import KeychainVocabulary
import TPMKeychainTesting
import Testing

@testable import KeychainStore

/// The fuzzing harness's seed corpora (Fixtures/fuzz/, and any crash found later and kept there)
/// replayed through the harness as built for tests, without libFuzzer: every run, not only when
/// Scripts/fuzz.sh runs.
@Suite struct FuzzCorpusTests {
    static let corpus = ProjectFixtures.directory.appendingPathComponent("fuzz").path

    @Test("every corpus file goes through its parser with no finding, and the store-file seeds are valid files")
    func replayCorpus() throws {
        let targets = try FileManager.default.contentsOfDirectory(atPath: Self.corpus).sorted()
        #expect(
            Set(
                ParserFuzzing.targets + [
                    "git-credential", "archive-record", "password-csv", "password-json", "agent-request",
                    "ssh-key-blob",
                ]) == Set(targets),
            "a parser without a corpus, or a corpus without a parser")
        var files: [String] = []
        for target in targets {
            let entries = try FileManager.default.contentsOfDirectory(atPath: Self.corpus + "/" + target).sorted()
            #expect(!entries.isEmpty, "\(target) has no seed")
            files += entries.map { Self.corpus + "/" + target + "/" + $0 }
        }
        let harness = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().appendingPathComponent(
            "tpm-keychain-fuzz"
        ).path
        let process = Process()
        process.executableURL = URL(fileURLWithPath: harness)
        process.arguments = ["--replay"] + files
        let output = Pipe()
        process.standardOutput = output
        try process.run()
        let printed = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        #expect(process.terminationStatus == 0, "findings:\n\(printed)")

        // Seeds that do not parse would leave the fuzzer to find the format's magic by itself.
        for file in try FileManager.default.contentsOfDirectory(atPath: Self.corpus + "/store-meta") {
            #expect(throws: Never.self) {
                _ = try StoreMetadata.parse(try bytes(of: Self.corpus + "/store-meta/" + file), path: file)
            }
        }
        for file in try FileManager.default.contentsOfDirectory(atPath: Self.corpus + "/attribute-list") {
            #expect(throws: Never.self) {
                _ = try AttributeList(decoding: try bytes(of: Self.corpus + "/attribute-list/" + file), path: file)
            }
        }
        #expect(throws: Never.self) {
            _ = try DeviceFile.parse(try bytes(of: Self.corpus + "/device-file/with-passcode"), path: "seed")
        }
    }
}
