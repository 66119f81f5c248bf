import Crypto
import Foundation
import KeychainStore
import SystemCalls
import TPM
import TPMKeychain
import WireFormat

#if canImport(Glibc)
import Glibc
#endif

/// Benchmarks of the item store: gets, durable sets and gets in a large service, each
/// next to a floor made of the same system calls and crypto with nothing of the store around them.
///
/// The TPM is used once per store, when its master key is unsealed; every timed operation here is
/// file I/O and AES-GCM.
struct StoreBenchmarks {
    let tpm: TPMConfiguration
    let summary: Summary
    /// Overrides every iteration count when set (command line).
    let iterations: Int?
    /// Only the gets (item 1): `TPMBenchmarks store-get N`, for profiling.
    var getsOnly = false
    /// Only the listing (item 3): `TPMBenchmarks store-list N`, for profiling.
    var listingOnly = false
    /// Only the durable set (item 2): `TPMBenchmarks store-set N`, for profiling.
    var setOnly = false
    /// Only the gets among many items (item 4): `TPMBenchmarks store-scale N`, for profiling.
    var scaleOnly = false

    func run() throws {
        let directory = try makeTemporaryDirectory("tpm-keychain-store-bench")
        defer { removeTree(directory) }
        print("\n== Item store; files in \(directory) (\(fileSystemType(directory)))")
        if listingOnly { return try listing(in: directory) }
        if setOnly { return try durableSet(in: directory) }
        if scaleOnly { return try scale(in: directory) }
        try gets(in: directory)
        if getsOnly { return }
        try durableSet(in: directory)
        try listing(in: directory)
        try scale(in: directory)
    }

    // MARK: 3. listing 10,000 items of one service

    private func listing(in directory: String) throws {
        let path = directory + "/listing"
        let service = "bench.list"
        let count = 10_000
        let filler = try ItemStore.open(at: path, tpm: tpm, durable: false)
        defer { filler.close() }
        for index in 0..<count {
            try filler.write(
                ItemIdentity(accessGroup: "", service: service, account: Self.account(index)), mode: .upsert,
                value: ItemValue(kind: .data, bytes: randomBytes(32)), changes: AttributeChanges())
        }
        let keychain = try Keychain(service: service, location: try KeychainLocation(path: path, tcti: tpm.tcti))
        // What the listing cache holds: resident memory with the store open before and after a
        // first listing (its results dropped), each after malloc_trim.
        _ = try keychain.data(forKey: Self.account(0))
        let open = trimmedResidentBytes()
        guard try keychain.allItems().count == count else { throw BenchmarkError("the listing misses items") }
        print("listing: the listing cache of \(count) items: \((trimmedResidentBytes() - open) >> 10) KiB resident")
        let groups = try FileManager.default.contentsOfDirectory(atPath: path + "/items2")
        guard groups.count == 1, let group = groups.first else { throw BenchmarkError("expected one group directory") }
        let groupPath = path + "/items2/" + group

        // The floor: list the same directory, then open, read and close every item file and
        // AES-GCM-open one attributes-sized ciphertext per file (the key derived beforehand).
        let sample =
            try FileManager.default.contentsOfDirectory(atPath: groupPath).first { $0.hasSuffix(".item") } ?? ""
        let attributesSize = try attributesLength(of: groupPath + "/" + sample)
        let key = SymmetricKey(size: .bits256)
        let box = try AES.GCM.seal(randomBytes(attributesSize), using: key)
        var buffer = [UInt8](repeating: 0, count: 4096)
        let floor = {
            for name in try directoryEntries(groupPath) where name.hasSuffix(".item") {
                try readWhole(groupPath + "/" + name, into: &buffer)
                sink &+= try AES.GCM.open(box, using: key).count
            }
        }
        let (ours, floorSamples) = try measurePair(
            iterations ?? 20, warmup: 2, { sink &+= try keychain.allItems().count }, floor)
        summary.add(
            Figure(
                name: "list \(count) items of one service, attributes only (Keychain.allItems)", ours: ours,
                floorName: "readdir + open+read+close each file + AES-GCM open of its attributes size",
                floor: floorSamples, goal: 2.0))
    }

    // MARK: 1. get of a 32-byte and a 4 KiB item

    private func gets(in directory: String) throws {
        let location = try KeychainLocation(path: directory + "/store", tcti: tpm.tcti)
        let count = iterations ?? 5000
        for size in [32, 4096] {
            let keychain = try Keychain(service: "bench.get.\(size)", location: location)
            let value = Data(randomBytes(size))
            let before = serviceDirectories(location.path)
            try keychain.set(value, forKey: "item")
            guard try keychain.data(forKey: "item") == value else {
                throw BenchmarkError("the store returned other bytes")
            }
            let itemFile = try onlyItemFile(newSince: before, store: location.path)
            let fileSize = try fileSizeOf(itemFile)

            // The floor: a file of the item file's size, opened, read and closed; then one AES-GCM
            // open of a ciphertext of the value's size with a key derived beforehand.
            let floorFile = directory + "/floor-\(size).bin"
            try Data(randomBytes(fileSize)).write(to: URL(fileURLWithPath: floorFile))
            let key = SymmetricKey(size: .bits256)
            let box = try AES.GCM.seal(randomBytes(size), using: key)
            var buffer = [UInt8](repeating: 0, count: fileSize + 1)
            let floor = {
                try readWhole(floorFile, into: &buffer)
                sink &+= try AES.GCM.open(box, using: key).count
            }

            let (ours, floorSamples) = try measurePair(
                count, warmup: 200, { sink &+= try keychain.data(forKey: "item")?.count ?? 0 }, floor)
            summary.add(
                Figure(
                    name: "get \(size) B (Keychain.data, file \(fileSize) B)", ours: ours,
                    floorName: "open+read+close \(fileSize) B + AES-GCM open \(size) B", floor: floorSamples, goal: 1.5)
            )

            // The first get after a write: the file is new (not held), its write's key not derived
            // by a read yet. The floor reads a file just replaced the same way (a new inode).
            let values = (0..<64).map { _ in Data(randomBytes(size)) }
            var next = 0
            let floorBytes = randomBytes(fileSize)
            let (afterWrite, floorAfterWrite) = try measurePair(
                max(count / 20, 100), warmup: 20,
                preparing: {
                    next = (next + 1) % values.count
                    try keychain.set(values[next], forKey: "item")
                }, { sink &+= try keychain.data(forKey: "item")?.count ?? 0 },
                preparing: { try durableReplace(floorFile, in: directory, with: floorBytes) }, floor)
            summary.add(
                Figure(
                    name: "get \(size) B, the first after a write (Keychain.data)", ours: afterWrite,
                    floorName: "the same floor, its file just replaced", floor: floorAfterWrite, goal: 1.3))

            // The engine without the public API's value decoding.
            let store = try ItemStore.open(at: location.path, tpm: tpm)
            defer { store.close() }
            let identity = try ItemIdentity(accessGroup: "", service: "bench.get.\(size)", account: "item")
            let (engine, floorAgain) = try measurePair(
                count, warmup: 200, { sink &+= try store.item(identity)?.value.bytes.count ?? 0 }, floor)
            summary.add(
                Figure(
                    name: "get \(size) B (ItemStore.item)", ours: engine,
                    floorName: "same floor", floor: floorAgain, goal: 1.5))
        }
    }

    // MARK: 2. durable set

    private func durableSet(in directory: String) throws {
        let location = try KeychainLocation(path: directory + "/store", tcti: tpm.tcti)
        let keychain = try Keychain(service: "bench.set", location: location)
        let before = serviceDirectories(location.path)
        try keychain.set(Data(randomBytes(32)), forKey: "item")
        let fileSize = try fileSizeOf(try onlyItemFile(newSince: before, store: location.path))

        // The floor: the same atomic, durable replacement with nothing else: write a temporary
        // file, fsync it, rename it over the target, fsync the directory.
        let floorDirectory = directory + "/floor-set"
        mkdir(floorDirectory, 0o700)
        let bytes = randomBytes(fileSize)
        let floorItem = floorDirectory + "/item"
        let floor = { try durableReplace(floorItem, in: floorDirectory, with: bytes) }

        // Each set stores a new value, made beforehand: the floor writes bytes it already has, so
        // making the value (a getrandom and a Data) is not part of what is timed on either side.
        let values = (0..<64).map { _ in Data(randomBytes(32)) }
        var next = 0
        let set = { () throws in
            defer { next = (next + 1) % values.count }
            try keychain.set(values[next], forKey: "item")
        }
        let count = iterations ?? 300
        let (ours, floorSamples) = try measurePair(count, warmup: 20, set, floor)
        // Where the time goes: the CPU time of this thread (user and kernel) per set, in batches
        // of 30 alternating with the floor, beside the wall-clock figures above.
        var oursCPU = Duration.zero
        var floorCPU = Duration.zero
        for _ in 0..<10 {
            var start = threadCPUTime()
            for _ in 0..<30 { try set() }
            oursCPU += threadCPUTime() - start
            start = threadCPUTime()
            for _ in 0..<30 { try floor() }
            floorCPU += threadCPUTime() - start
        }
        func perSet(_ total: Duration) -> String { format(seconds(total) / 300) }
        print(
            "durable set: CPU time per set (this thread, user and kernel): ours \(perSet(oursCPU)),"
                + " floor \(perSet(floorCPU))")
        summary.add(
            Figure(
                name: "durable set 32 B (Keychain.set, upsert)", ours: ours,
                floorName: "write \(fileSize) B tmp + fsync + rename + fsync dir", floor: floorSamples, goal: 1.2))
    }

    // MARK: 4. gets with 100, 10,000 and 100,000 items in one service

    private func scale(in directory: String) throws {
        let path = directory + "/scale"
        let service = "bench.scale"
        let count = iterations ?? 2000
        print("scale: filling one service with ItemStore.open(durable: false): no fsync for the fill only")
        let filler = try ItemStore.open(at: path, tpm: tpm, durable: false)
        defer { filler.close() }
        let reader = try Keychain(service: service, location: try KeychainLocation(path: path, tcti: tpm.tcti))
        _ = try reader.data(forKey: "warm-up") // opens the store (one TPM unseal) before RSS is read
        let baseline = residentBytes()
        print("scale: RSS after opening the stores: \(mebibytes(baseline))")

        var filled = 0
        var rows: [(items: Int, samples: Samples, floor: Samples, rss: Int, fill: Double, added: Int)] = []
        var generator = SplitMix64(seed: 0x5EED)
        for target in [100, 10_000, 100_000] {
            let clock = ContinuousClock()
            let added = target - filled
            let fillTime = try clock.measure {
                while filled < target {
                    try filler.write(
                        ItemIdentity(accessGroup: "", service: service, account: Self.account(filled)),
                        mode: .upsert, value: ItemValue(kind: .data, bytes: randomBytes(32)),
                        changes: AttributeChanges())
                    filled += 1
                }
            }
            // The fill left its files dirty (no fsync): write them back now, so the gets are not
            // timed against the kernel's background writeback of tens of thousands of files.
            sync()
            let rssBefore = residentBytes()
            // A different random existing item every time; the names are made before the clock runs.
            let accounts = (0..<count + 200).map { _ in Self.account(Int(generator.next() % UInt64(filled))) }
            var index = 0
            // The floor at this size: a random item file of the service's directory opened, read
            // and closed, and one AES-GCM open of 32 bytes: what the file system makes of the size.
            let groups = try FileManager.default.contentsOfDirectory(atPath: path + "/items2")
            guard groups.count == 1, let group = groups.first else {
                throw BenchmarkError("expected one group directory")
            }
            let groupPath = path + "/items2/" + group
            let files = try directoryEntries(groupPath).filter { $0.hasSuffix(".item") }
            let floorFiles = (0..<count + 200).map { _ in
                groupPath + "/" + files[Int(generator.next() % UInt64(files.count))]
            }
            let floorKey = SymmetricKey(size: .bits256)
            let box = try AES.GCM.seal(randomBytes(32), using: floorKey)
            var buffer = [UInt8](repeating: 0, count: 4096)
            var floorIndex = 0
            let (samples, floorSamples) = try measurePair(
                count, warmup: 200,
                {
                    defer { index += 1 }
                    guard let value = try reader.data(forKey: accounts[index % accounts.count]) else {
                        throw BenchmarkError("an item is missing")
                    }
                    sink &+= value.count
                },
                {
                    defer { floorIndex += 1 }
                    try readWhole(floorFiles[floorIndex % floorFiles.count], into: &buffer)
                    sink &+= try AES.GCM.open(box, using: floorKey).count
                })
            let rssAfter = residentBytes()
            summary.add(
                Figure(
                    name: "get 32 B, \(target) items in the service (random item)", ours: samples,
                    floorName: "open+read+close a random item file of the service + AES-GCM open 32 B",
                    floor: floorSamples, goal: nil))
            print(
                String(
                    format: "    fill: %d items in %.2f s (%.0f writes/s); RSS before gets %@, after %@ (%+.0f KiB)",
                    added, fillTime.seconds, Double(added) / fillTime.seconds, mebibytes(rssBefore),
                    mebibytes(rssAfter),
                    Double(rssAfter - rssBefore) / 1024))
            rows.append((target, samples, floorSamples, rssAfter, fillTime.seconds, added))
        }
        PlotData.write(
            "gets-by-item-count", header: ["items", "median_us", "p90_us"],
            rows: rows.map { [String($0.items), String($0.samples.median * 1e6), String($0.samples.p90 * 1e6)] })
        print("scale summary:")
        for (items, samples, floor, rss, fill, added) in rows {
            print(
                "    \(items) items: get median \(format(samples.median)), p90 \(format(samples.p90)); floor median \(format(floor.median)) ("
                    + String(format: "%.2f×", samples.median / floor.median) + "); RSS \(mebibytes(rss)); "
                    + String(format: "fill of the last %d: %.2f s", added, fill))
        }
    }

    private static func account(_ index: Int) -> String { "account-\(index)" }

    // MARK: Helpers

    /// The service directories of a store (their names are keyed hashes the benchmark cannot compute).
    private func serviceDirectories(_ store: String) -> Set<String> {
        Set((try? FileManager.default.contentsOfDirectory(atPath: store + "/items2")) ?? [])
    }

    /// The item file of the one service created since `before`, which holds a single item.
    private func onlyItemFile(newSince before: Set<String>, store: String) throws -> String {
        let created = serviceDirectories(store).subtracting(before)
        guard created.count == 1, let name = created.first else {
            throw BenchmarkError("expected one new service directory in \(store)")
        }
        let directory = store + "/items2/" + name
        let files = try FileManager.default.contentsOfDirectory(atPath: directory).filter { $0.hasSuffix(".item") }
        guard files.count == 1 else { throw BenchmarkError("\(directory) holds \(files.count) items, expected 1") }
        return directory + "/" + files[0]
    }
}

/// The attributes plaintext length a format-2 item file's header gives (bytes 116..<120).
private func attributesLength(of path: String) throws -> Int {
    let bytes = [UInt8](try Data(contentsOf: URL(fileURLWithPath: path)).prefix(124))
    guard bytes.count == 124 else { throw BenchmarkError("\(path) is not a format-2 item") }
    return Int(BigEndian.integer(bytes[116..<120], as: UInt32.self))
}

/// The names in a directory, by opendir/readdir: what a listing costs at the least.
private func directoryEntries(_ path: String) throws -> [String] {
    guard let stream = opendir(path) else { throw BenchmarkError("cannot list \(path)") }
    defer { closedir(stream) }
    var names: [String] = []
    while let entry = readdir(stream) {
        let name = withUnsafeBytes(of: entry.pointee.d_name) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
        if name != "." && name != ".." { names.append(name) }
    }
    return names
}

private func fileSizeOf(_ path: String) throws -> Int {
    var status = stat()
    guard lstat(path, &status) == 0 else { throw BenchmarkError("cannot stat \(path)") }
    return Int(status.st_size)
}

/// open, read until end of file, close: what any reader of a small file of unknown size does.
private func readWhole(_ path: String, into buffer: inout [UInt8]) throws {
    let descriptor = open(path, O_RDONLY | O_CLOEXEC)
    guard descriptor >= 0 else { throw BenchmarkError("cannot open \(path)") }
    defer { close(descriptor) }
    var total = 0
    try buffer.withUnsafeMutableBytes { raw in
        while true {
            let count = read(descriptor, raw.baseAddress! + total, raw.count - total)
            if count == 0 { break }
            guard count > 0 else { throw BenchmarkError("cannot read \(path)") }
            total += count
        }
    }
    sink &+= total
}

/// The floor of a durable write: temporary file, write, fsync, close, rename, fsync the directory.
/// The durable set's floor: `path` replaced atomically and durably, `directory` being its
/// directory (given, so that no path is worked out while the clock runs).
private func durableReplace(_ path: String, in directory: String, with bytes: [UInt8]) throws {
    let temporary = path + ".tmp"
    let descriptor = open(temporary, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
    guard descriptor >= 0 else { throw BenchmarkError("cannot create \(temporary)") }
    let written = bytes.withUnsafeBytes { write(descriptor, $0.baseAddress!, $0.count) }
    guard written == bytes.count, fsync(descriptor) == 0 else { throw BenchmarkError("cannot write \(temporary)") }
    close(descriptor)
    guard rename(temporary, path) == 0 else { throw BenchmarkError("cannot rename \(temporary)") }
    let directoryDescriptor = open(directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
    guard directoryDescriptor >= 0 else { throw BenchmarkError("cannot open \(directory)") }
    defer { close(directoryDescriptor) }
    guard fsync(directoryDescriptor) == 0 else { throw BenchmarkError("cannot fsync \(directory)") }
}

private func randomBytes(_ count: Int) -> [UInt8] {
    SystemRandom.bytes(count)
}

/// The file system type of `path` as /proc/mounts names it (the longest mount point containing it).
func fileSystemType(_ path: String) -> String {
    guard let mounts = try? String(contentsOfFile: "/proc/mounts", encoding: .utf8) else {
        return "unknown file system"
    }
    var best = ("", "unknown")
    for line in mounts.split(separator: "\n") {
        let fields = line.split(separator: " ")
        guard fields.count > 2 else { continue }
        let point = String(fields[1])
        if (path == point || path.hasPrefix(point == "/" ? "/" : point + "/")) && point.count > best.0.count {
            best = (point, "\(fields[2]) on \(fields[0])")
        }
    }
    return best.1
}

/// A small deterministic generator, so runs pick the same items.
struct SplitMix64: RandomNumberGenerator {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
