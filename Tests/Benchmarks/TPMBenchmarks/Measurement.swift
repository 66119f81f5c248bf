import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// Timed samples of one operation, sorted, in seconds.
struct Samples {
    let sorted: [Double]

    init(_ durations: [Duration]) {
        sorted = durations.map(\.seconds).sorted()
    }

    var median: Double { sorted[sorted.count / 2] }
    var p90: Double { sorted[sorted.count * 9 / 10] }
    var count: Int { sorted.count }
}

extension Duration {
    var seconds: Double { Double(components.seconds) + Double(components.attoseconds) / 1e18 }
}

/// One line of the summary printed at the end of a run: a figure next to its floor and goal.
struct Figure {
    let name: String
    let ours: Samples
    let floorName: String?
    let floor: Samples?
    /// The largest acceptable ours/floor ratio of medians, or nil when there is no goal.
    let goal: Double?

    var ratio: Double? { floor.map { ours.median / $0.median } }
}

/// Collects the figures of a run and prints them as one Markdown table.
final class Summary {
    private(set) var figures: [Figure] = []

    func add(_ figure: Figure) {
        figures.append(figure)
        var line =
            "\(figure.name): median \(format(figure.ours.median)), p90 \(format(figure.ours.p90)) (n=\(figure.ours.count))"
        if let floor = figure.floor, let floorName = figure.floorName, let ratio = figure.ratio {
            line +=
                "\n    floor (\(floorName)): median \(format(floor.median)), p90 \(format(floor.p90)); ratio \(String(format: "%.2f", ratio))x"
            if let goal = figure.goal {
                line += ", goal <= \(String(format: "%.2f", goal))x: " + (ratio <= goal ? "met" : "MISSED")
            }
        }
        print(line)
    }

    func printTable() {
        guard !figures.isEmpty else { return }
        print("\n| Figure | Ours median (p90) | Floor | Floor median (p90) | Ratio | Goal |")
        print("| --- | --- | --- | --- | --- | --- |")
        for figure in figures {
            let floorCells: String
            if let floor = figure.floor, let ratio = figure.ratio {
                let goal =
                    figure.goal.map { String(format: "<= %.2fx ", $0) + (ratio <= $0 ? "met" : "**missed**") } ?? "-"
                floorCells =
                    "\(figure.floorName ?? "") | \(format(floor.median)) (\(format(floor.p90))) | \(String(format: "%.2f", ratio))x | \(goal)"
            } else {
                floorCells = "- | - | - | -"
            }
            print("| \(figure.name) | \(format(figure.ours.median)) (\(format(figure.ours.p90))) | \(floorCells) |")
        }
    }
}

/// Seconds in the unit that reads best: µs below a millisecond, ms otherwise.
func format(_ seconds: Double) -> String {
    seconds < 1e-3 ? String(format: "%.1f µs", seconds * 1e6) : String(format: "%.2f ms", seconds * 1e3)
}

/// Times `body` `iterations` times after `warmup` untimed runs.
func measure(_ iterations: Int, warmup: Int = 1, _ body: () throws -> Void) rethrows -> Samples {
    let clock = ContinuousClock()
    for _ in 0..<warmup { try body() }
    var durations: [Duration] = []
    durations.reserveCapacity(iterations)
    for _ in 0..<iterations { durations.append(try clock.measure(body)) }
    return Samples(durations)
}

/// Times two operations alternately (a b, b a, a b, ...), so drift in the machine's state (CPU
/// frequency, page cache, other processes) falls on both alike.
func measurePair(
    _ iterations: Int, warmup: Int, _ a: () throws -> Void, _ b: () throws -> Void
) rethrows -> (Samples, Samples) {
    let clock = ContinuousClock()
    for _ in 0..<warmup {
        try a()
        try b()
    }
    var first: [Duration] = []
    var second: [Duration] = []
    first.reserveCapacity(iterations)
    second.reserveCapacity(iterations)
    for index in 0..<iterations {
        if index % 2 == 0 {
            first.append(try clock.measure(a))
            second.append(try clock.measure(b))
        } else {
            second.append(try clock.measure(b))
            first.append(try clock.measure(a))
        }
    }
    return (Samples(first), Samples(second))
}

/// As ``measurePair(_:warmup:_:_:)``, each timed run preceded by its own untimed preparation
/// (a write before the read that follows it).
func measurePair(
    _ iterations: Int, warmup: Int, preparing prepareA: () throws -> Void, _ a: () throws -> Void,
    preparing prepareB: () throws -> Void, _ b: () throws -> Void
) rethrows -> (Samples, Samples) {
    let clock = ContinuousClock()
    for _ in 0..<warmup {
        try prepareA()
        try a()
        try prepareB()
        try b()
    }
    var first: [Duration] = []
    var second: [Duration] = []
    for index in 0..<iterations {
        if index % 2 == 0 {
            try prepareA()
            first.append(try clock.measure(a))
            try prepareB()
            second.append(try clock.measure(b))
        } else {
            try prepareB()
            second.append(try clock.measure(b))
            try prepareA()
            first.append(try clock.measure(a))
        }
    }
    return (Samples(first), Samples(second))
}

/// Keeps results alive so the optimiser cannot drop the work that made them.
nonisolated(unsafe) var sink = 0

/// Ours one by one against a floor that is another process, in ten rounds of `batch` each, the
/// side that goes first alternating from round to round (the machine drifts within minutes).
/// `floor` runs `batch` of its own and returns their times in milliseconds.
func interleavedWithFloor(
    batch: Int, ours: () throws -> Void, floor: (Int) throws -> [Double]
) throws -> (ours: Samples, floor: Samples) {
    let clock = ContinuousClock()
    var oursTimes: [Duration] = []
    var floorTimes: [Double] = []
    for round in 0..<10 {
        for side in (round % 2 == 0 ? [0, 1] : [1, 0]) {
            if side == 0 {
                for _ in 0..<batch { oursTimes.append(try clock.measure { try ours() }) }
            } else {
                floorTimes += try floor(batch)
            }
        }
    }
    return (Samples(oursTimes), Samples(floorTimes.map { Duration.nanoseconds(Int64($0 * 1e6)) }))
}

/// As ``interleavedWithFloor(batch:ours:floor:)`` when ours is another process too: each side
/// runs `batch` of its own and returns their times in milliseconds.
func interleavedProcesses(
    batch: Int, ours: (Int) throws -> [Double], floor: (Int) throws -> [Double]
) throws -> (ours: Samples, floor: Samples) {
    var oursTimes: [Double] = []
    var floorTimes: [Double] = []
    for round in 0..<10 {
        for side in (round % 2 == 0 ? [0, 1] : [1, 0]) {
            if side == 0 { oursTimes += try ours(batch) } else { floorTimes += try floor(batch) }
        }
    }
    func samples(_ times: [Double]) -> Samples { Samples(times.map { Duration.nanoseconds(Int64($0 * 1e6)) }) }
    return (samples(oursTimes), samples(floorTimes))
}

/// This process's resident set size in bytes (/proc/self/statm, second field).
func residentBytes() -> Int {
    guard let text = try? String(contentsOfFile: "/proc/self/statm", encoding: .utf8) else { return 0 }
    let fields = text.split(separator: " ")
    guard fields.count > 1, let pages = Int(fields[1]) else { return 0 }
    return pages * sysconf(Int32(_SC_PAGESIZE))
}

/// ``residentBytes()`` after glibc's malloc_trim(0) has returned the free memory of every arena,
/// so that what was freed no longer counts (looked up at run time: Glibc's module lacks malloc.h).
func trimmedResidentBytes() -> Int {
    typealias Trim = @convention(c) (Int) -> Int32
    if let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "malloc_trim") {
        _ = unsafeBitCast(symbol, to: Trim.self)(0)
    }
    return residentBytes()
}

/// The CPU time this thread has used (CLOCK_THREAD_CPUTIME_ID), user and kernel.
func threadCPUTime() -> Duration { cpuTime(CLOCK_THREAD_CPUTIME_ID) }

/// The CPU time every thread of this process has used (CLOCK_PROCESS_CPUTIME_ID), user and kernel.
func processCPUTime() -> Duration { cpuTime(CLOCK_PROCESS_CPUTIME_ID) }

private func cpuTime(_ clock: clockid_t) -> Duration {
    var time = timespec()
    clock_gettime(clock, &time)
    return .seconds(time.tv_sec) + .nanoseconds(time.tv_nsec)
}

/// A duration in seconds, as ``format(_:)`` takes it.
func seconds(_ duration: Duration) -> Double {
    Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
}

func mebibytes(_ bytes: Int) -> String { String(format: "%.1f MiB", Double(bytes) / 1_048_576) }

/// A fresh private directory (0700) under the system temporary directory.
func makeTemporaryDirectory(_ prefix: String) throws -> String {
    var template = Array((NSTemporaryDirectory() + "/\(prefix).XXXXXX").utf8CString)
    guard let result = template.withUnsafeMutableBufferPointer({ mkdtemp($0.baseAddress!) }) else {
        throw BenchmarkError("mkdtemp failed: errno \(errno)")
    }
    return (String(cString: result) as NSString).standardizingPath
}

func removeTree(_ path: String) {
    try? FileManager.default.removeItem(atPath: path)
}

struct BenchmarkError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

/// Where the benchmarks leave their figures as tab-separated tables for the plot
/// (Scripts/plot-benchmarks.py): `TPM_KEYCHAIN_BENCH_DATA`, set by Scripts/benchmarks.sh; nothing
/// is written without it.
enum PlotData {
    static func write(_ name: String, header: [String], rows: [[String]]) {
        guard let directory = ProcessInfo.processInfo.environment["TPM_KEYCHAIN_BENCH_DATA"], !directory.isEmpty
        else { return }
        try? FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let text = ([header] + rows).map { $0.joined(separator: "\t") }.joined(separator: "\n") + "\n"
        do {
            try text.write(toFile: directory + "/" + name + ".tsv", atomically: true, encoding: .utf8)
        } catch {
            print("plot data: cannot write \(directory)/\(name).tsv: \(error)")
        }
    }
}

/// Runs `executable` (`environment` added to this process's), which prints one `sample MS` line
/// per operation it timed itself; those times in milliseconds.
func processSamples(
    _ executable: String, _ arguments: [String], environment: [String: String] = [:]
) throws -> [Double] {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: executable)
    process.arguments = arguments
    if !environment.isEmpty {
        process.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 }
    }
    let output = Pipe()
    process.standardOutput = output
    try process.run()
    let data = output.fileHandleForReading.readDataToEndOfFile()
    process.waitUntilExit()
    return String(decoding: data, as: UTF8.self).split(separator: "\n").compactMap { line in
        line.hasPrefix("sample ") ? Double(line.dropFirst(7)) : nil
    }
}
