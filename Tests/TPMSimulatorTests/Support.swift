import Foundation
import TPMKeychainTesting
import Testing

@testable import TPMSimulator

#if canImport(Glibc)
import Glibc
#endif

typealias ToolResult = TPM2Tools.Result

func runTool(_ arguments: [String], tcti: String) throws -> ToolResult {
    try TPM2Tools.run(arguments, tcti: tcti)
}

/// Runs a tool and records a test issue (with its stderr) when it fails.
@discardableResult
func runToolExpectingSuccess(
    _ arguments: [String], tcti: String, sourceLocation: SourceLocation = #_sourceLocation
) throws -> String {
    let result = try runTool(arguments, tcti: tcti)
    #expect(
        result.status == 0, "\(arguments.joined(separator: " ")) failed: \(result.errorOutput)",
        sourceLocation: sourceLocation)
    return result.output
}

/// Whether a process with this PID exists (zombies included), and the errno if not.
func processExists(_ pid: Int32) -> (exists: Bool, error: Int32) {
    if kill(pid, 0) == 0 { return (true, 0) }
    return (false, errno)
}

/// A fresh path under the temporary directory that does not exist yet.
func makeScratchPath(_ name: String) -> String {
    let path = NSTemporaryDirectory() + "/tpm-simulator-tests-\(name)-\(UUID().uuidString)"
    return path
}

/// Sends TPM2_GetRandom(8) and returns the response; the TPM answered if this does not throw.
func getRandom(_ tpm: SoftwareTPM) throws -> TPMResponse {
    try TPMTransport.execute(
        RandomNumberGeneratorCommands.getRandom(byteCount: 8), name: "TPM2_GetRandom", endpoint: tpm.endpoint,
        timeout: .seconds(10))
}

/// Parses `tpm2_getcap properties-variable` output into property name -> value.
func variableProperties(_ tpm: SoftwareTPM) throws -> [String: String] {
    let output = try runToolExpectingSuccess(["tpm2_getcap", "properties-variable"], tcti: tpm.tcti)
    var properties: [String: String] = [:]
    for line in output.split(separator: "\n") where line.hasPrefix("TPM2_PT_") {
        let parts = line.split(separator: ":", maxSplits: 1).map { $0.trimmingCharacters(in: .whitespaces) }
        if parts.count == 2 { properties[parts[0]] = parts[1] }
    }
    return properties
}

func transientHandles(_ tpm: SoftwareTPM) throws -> [String] {
    try runToolExpectingSuccess(["tpm2_getcap", "handles-transient"], tcti: tpm.tcti)
        .split(separator: "\n").map { $0.trimmingCharacters(in: CharacterSet(charactersIn: "- ")) }
        .filter { !$0.isEmpty }
}
