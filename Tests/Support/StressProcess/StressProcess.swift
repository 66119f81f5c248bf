// The crash tests' side of tpm-keychain-stress: the process, read line by line, and where to
// kill it. Shared by the test targets that kill whole-store operations.
package import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// A running tpm-keychain-stress, built next to the test bundle, and its output so far.
package final class StressProcess {
    package static let executable = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
        .appendingPathComponent("tpm-keychain-stress").path

    package let process = Process()
    private let output = Pipe()
    /// Everything read from its standard output so far.
    package private(set) var buffer = ""

    package init(_ arguments: [String]) throws {
        process.executableURL = URL(fileURLWithPath: Self.executable)
        process.arguments = arguments
        process.standardOutput = output
        process.standardError = FileHandle.standardError
        try process.run()
    }

    /// Blocks until a complete output line is `line`, or starts with `line` followed by a space
    /// (or with `line` when it ends in one); false when the process closed its output first (it
    /// finished or died).
    @discardableResult
    package func waitFor(_ line: String) -> Bool {
        func matches(_ candidate: Substring) -> Bool {
            candidate == line || candidate.hasPrefix(line.hasSuffix(" ") ? line : line + " ")
        }
        while true {
            if let end = unscanned.lastIndex(of: "\n") {
                let found = unscanned[..<end].split(separator: "\n").contains(where: matches)
                unscanned = String(unscanned[unscanned.index(after: end)...])
                if found { return true }
            }
            let chunk = output.fileHandleForReading.availableData
            if chunk.isEmpty { return false }
            let text = String(decoding: chunk, as: UTF8.self)
            buffer += text
            unscanned += text
        }
    }

    /// The output ``waitFor(_:)`` has not looked at yet: at most a line's beginning.
    private var unscanned = ""

    package func kill() {
        Glibc.kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
    }

    /// Waits for the process to end and returns all of its output.
    package func finish() -> String {
        buffer += String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        return buffer
    }
}

/// Where a crash test kills a whole-store operation (rotation, format upgrade, cipher change),
/// chosen from the progress the stress tool reports, never from the timing of an earlier run: a
/// loaded machine shifts every timed kill to one side of the commit.
package struct KillPoint: CustomStringConvertible {
    /// The stress tool's arguments that make it report or pause there.
    package let arguments: [String]
    /// The output line to wait for before the kill.
    package let line: String

    package var description: String { line }

    /// Round `round`'s kill point, cycling through four kinds, for an operation that rewrites
    /// `items` items:
    /// - paused after a random number of items: a kill before the commit, between two files;
    /// - paused right after the commit: a kill after it, before the old copy is removed;
    /// - once a random number of items is reported, without pausing: anywhere after that point,
    ///   inside a file's write as well;
    /// - once the commit is reported, without pausing: anywhere in the cleanup, or after the end.
    package static func forRound(_ round: Int, items: Int) -> KillPoint {
        let rewritten = "rewrote \(Int.random(in: 1...max(1, items)))"
        switch round % 4 {
        case 0: return KillPoint(arguments: ["--pause-at", rewritten], line: "paused \(rewritten)")
        case 1: return KillPoint(arguments: ["--pause-at", "committed"], line: "paused committed")
        case 2: return KillPoint(arguments: ["--progress"], line: "progress \(rewritten)")
        default: return KillPoint(arguments: ["--progress"], line: "progress committed")
        }
    }
}
