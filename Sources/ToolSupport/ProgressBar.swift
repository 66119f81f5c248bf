import FoundationEssentials
import SystemCalls

/// A one-line progress bar on a terminal's standard error; nothing when it is not a terminal.
/// Unchecked: an operation reports its progress from one task, one call after another.
package final class ProgressBar: @unchecked Sendable {
    private let enabled: Bool
    private var shown = false

    package init(enabled: Bool) { self.enabled = enabled }

    package func show(_ done: Int, of total: Int) {
        guard enabled, total > 0 else { return }
        let width = 30
        let filled = done * width / total
        let line =
            "\r[" + String(repeating: "#", count: filled) + String(repeating: " ", count: width - filled)
            + "] \(done)/\(total)"
        writeStandardError(line)
        shown = true
    }

    /// A count, for work whose total is not known in advance.
    package func show(count: Int, _ unit: String) {
        guard enabled else { return }
        writeStandardError("\r\(count) \(unit)")
        shown = true
    }

    package func finish() {
        if shown { writeStandardError("\n") }
        shown = false
    }
}
