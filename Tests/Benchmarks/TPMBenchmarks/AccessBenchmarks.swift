import Foundation
import TPM
import TPMKeychain
import TPMKeychainTesting

/// Benchmarks of access control: a protected get inside a reuse window against an
/// unprotected get; a first protected get (one key-record unseal in a fresh connection) against
/// the C floor doing the same unseal; and the TPM commands (NV, DA-counted) each operation sends.
struct AccessBenchmarks: @unchecked Sendable { // Summary is only used from one task at a time
    let summary: Summary
    let iterations: Int?
    /// Only the first protected get (`TPMBenchmarks access-first N`), for a profiler.
    var firstGetOnly = false

    func run() throws {
        let simulator = try SoftwareTPM.start()
        defer { simulator.stop() }
        let directory = try makeTemporaryDirectory("tpm-keychain-access-bench")
        defer { removeTree(directory) }
        print("\n== Access control; swtpm \(simulator.tcti)")
        if firstGetOnly { return try blocking { try await firstProtectedGet(simulator, directory) } }
        try blocking { try await reuseWindow(simulator, directory) }
        try blocking { try await firstProtectedGet(simulator, directory) }
        try blocking { try await commandCounts(simulator, directory) }
        try blocking { try await coldPathsAtTheirPace(simulator, directory, resourceManaged: false) }
        try blocking { try await coldPathsAtTheirPace(simulator, directory, resourceManaged: true) }
    }

    private func location(_ tcti: String, _ directory: String, _ name: String) throws -> KeychainLocation {
        var location = try KeychainLocation(path: directory + "/" + name, tcti: tcti)
        location.deviceDirectory = directory + "/" + name + "-device"
        return location
    }

    // MARK: 1. inside the reuse window

    private func reuseWindow(_ simulator: SoftwareTPM, _ directory: String) async throws {
        let location = try location(simulator.tcti, directory, "reuse")
        defer { Keychain.closeStore(location) }
        let face = SimulatedAuthenticator()
        let context = AuthenticationContext(authenticator: face, location: location)
        context.allowableReuseDuration = AuthenticationContext.maximumReuseDuration
        let keychain = try Keychain(service: "bench.access", location: location)
        try keychain.set("plain-value-32-bytes-long-......", forKey: "plain")
        try await keychain.set(
            "bio-value-32-bytes-long-........", forKey: "bio",
            accessControl: try AccessControl(.whenUnlocked, flags: .biometryAny),
            context: context)
        _ = try await keychain.get("bio", as: String.self, context: context)
        let clock = ContinuousClock()
        var plain: [Duration] = []
        var protected: [Duration] = []
        let rounds = 20
        let batch = max((iterations ?? 1000) / 20, 1)
        for round in 0..<rounds {
            // Alternating batches: the machine's drift falls on both alike.
            for side in (round % 2 == 0 ? [0, 1] : [1, 0]) {
                for _ in 0..<batch {
                    if side == 0 {
                        plain.append(
                            try clock.measure { sink &+= try keychain.get("plain", as: String.self)?.count ?? 0 })
                    } else {
                        let start = clock.now
                        sink &+= try await keychain.get("bio", as: String.self, context: context)?.count ?? 0
                        protected.append(clock.now - start)
                    }
                }
            }
        }
        guard face.attempts == 1 else { throw BenchmarkError("the reuse window prompted \(face.attempts) times") }
        summary.add(
            Figure(
                name: "protected get (biometryAny) inside the reuse window", ours: Samples(protected),
                floorName: "unprotected get", floor: Samples(plain), goal: 1.5))
    }

    // MARK: 2. the first protected get

    private func firstProtectedGet(_ simulator: SoftwareTPM, _ directory: String) async throws {
        let location = try location(simulator.tcti, directory, "first")
        defer { Keychain.closeStore(location) }
        let face = SimulatedAuthenticator()
        let keychain = try Keychain(service: "bench.access", location: location)
        try await keychain.set(
            "bio", forKey: "bio", accessControl: try AccessControl(.whenUnlocked, flags: .biometryAny),
            context: AuthenticationContext(authenticator: face, location: location))
        let clock = ContinuousClock()
        var ours: [Duration] = []
        var floor: [Double] = []
        let rounds = 10
        let batch = max((iterations ?? 200) / 10, 2)
        var oursCPU = Duration.zero
        for round in 0..<rounds {
            for side in (round % 2 == 0 ? [0, 1] : [1, 0]) {
                if side == 0 {
                    let cpuBefore = processCPUTime()
                    for _ in 0..<batch {
                        // A new context each time: no reuse, one record unseal in a fresh connection.
                        let context = AuthenticationContext(authenticator: face, location: location)
                        let start = clock.now
                        sink &+= try await keychain.get("bio", as: String.self, context: context)?.count ?? 0
                        ours.append(clock.now - start)
                    }
                    oursCPU += processCPUTime() - cpuBefore
                } else {
                    floor += try floorSamples(simulator.tcti, batch)
                }
            }
        }
        // The floor's own CPU time is that of its process: `perf stat -e task-clock ESAPIFloor TCTI N record`.
        print(
            "first protected get: CPU time per get (this process, every thread, user and kernel): "
                + format(seconds(oursCPU) / Double(ours.count)))
        summary.add(
            Figure(
                name: "first protected get (one key-record unseal, fresh TPM connection)", ours: Samples(ours),
                floorName: "C ESAPI: connect, ContextLoad, Load, salted PolicyCommandCode session, Unseal",
                floor: Samples(floor.map { Duration.nanoseconds(Int64($0 * 1e6)) }), goal: 1.2))
    }

    private func floorSamples(_ tcti: String, _ count: Int) throws -> [Double] {
        try Self.floorSamples(tcti, count, mode: "record")
    }

    /// One batch of `ESAPIFloor TCTI COUNT MODE`, in milliseconds per sample.
    static func floorSamples(_ tcti: String, _ count: Int, mode: String) throws -> [Double] {
        let executable = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
            .appendingPathComponent("ESAPIFloor")
        guard FileManager.default.isExecutableFile(atPath: executable.path) else {
            throw BenchmarkError("build the floor first: swift build -c release --product ESAPIFloor")
        }
        return try processSamples(executable.path, [tcti, String(count), mode])
    }

    // MARK: 3. TPM commands per operation

    private func commandCounts(_ simulator: SoftwareTPM, _ directory: String) async throws {
        let proxy = try RecordingTPMProxy.start(forwardingTo: simulator.port)
        defer { proxy.stop() }
        let location = try location(proxy.tcti, directory, "counted")
        defer { Keychain.closeStore(location) }
        let passcode = SecretBytes(copying: Array("bench passcode".utf8))
        let face = SimulatedAuthenticator()
        let device = KeychainDevice(location: location)
        let keychain = try Keychain(service: "bench.access", location: location)
        func counted(_ what: String, _ body: () async throws -> Void) async throws {
            proxy.reset()
            try await body()
            let codes = proxy.commandCodes
            let nv = codes.filter { [0x12A, 0x134, 0x137].contains($0) }.count
            print(
                "commands, \(what) (\(codes.count); NV writes \(nv)): \(codes.map(RecordingTPMProxy.commandName).joined(separator: ", "))"
            )
        }
        try keychain.set("x", forKey: "warm-up")
        try await counted("set-passcode") { try device.setPasscode(passcode) }
        try await counted("add biometryCurrentSet (new key record)") {
            try await keychain.set(
                "v", forKey: "bio", accessControl: try AccessControl(.whenUnlocked, flags: .biometryCurrentSet),
                context: AuthenticationContext(authenticator: face, location: location))
        }
        try await counted("add devicePasscode (new key record)") {
            try await keychain.set(
                "v", forKey: "pin", accessControl: try AccessControl(.whenUnlocked, flags: .devicePasscode))
        }
        try await counted("first get, biometryCurrentSet (lock-bound)") {
            _ = try await keychain.get(
                "bio", as: String.self, context: AuthenticationContext(authenticator: face, location: location))
        }
        try await counted("first get, devicePasscode (one DA-counted check)") {
            _ = try await keychain.get(
                "pin", as: String.self, context: AuthenticationContext(passcode: .fixed(passcode), location: location))
        }
        try await counted("lock-keychain") { try device.lock() }
        try await counted("unlock-keychain (one DA-counted check)") { try device.unlock(passcode: passcode) }
        face.reenroll()
        try await counted("get after an enrollment change (counter moved, item invalidated)") {
            _ = try? await keychain.get(
                "bio", as: String.self, context: AuthenticationContext(authenticator: face, location: location))
        }
        try await counted("change-passcode") {
            try device.changePasscode(from: passcode, to: SecretBytes(copying: Array("bench passcode 2".utf8)))
        }
    }

    // MARK: 4. cold paths at the pace of real TPMs

    /// Each cold path once through a proxy that holds every command back by its cost in a
    /// `TPMLatencyProfile`: swtpm as it is, then a firmware TPM's pace and a discrete chip's. What a
    /// person would wait on each kind of machine; the profiles are models (see their sources).
    ///
    /// `resourceManaged`: as behind /dev/tpmrm0 (real machines' default): the client sends no
    /// stale-handle sweep and no flushes at close, and what each connection left is flushed
    /// straight on swtpm, unrecorded and without the profile's delay (the kernel flushes when the
    /// file closes, which on a real TPM costs time too, but after the process has its answer).
    private func coldPathsAtTheirPace(
        _ simulator: SoftwareTPM, _ directory: String, resourceManaged: Bool
    ) async throws {
        let profiles: [TPMLatencyProfile?] = [nil, .firmware, .discrete]
        let mode = resourceManaged ? "rm" : "direct"
        var paths: [String] = []
        var commands: [String: Int] = [:]
        var times: [String: [Duration]] = [:]
        let passcode = SecretBytes(copying: Array("bench passcode".utf8))
        for (index, profile) in profiles.enumerated() {
            let proxy = try RecordingTPMProxy.start(forwardingTo: simulator.port, latency: profile)
            defer { proxy.stop() }
            if resourceManaged {
                TPMConfiguration.treatAsResourceManaged(proxy.tcti) { [proxy] in proxy.flushLeftovers() }
            }
            defer { TPMConfiguration.stopTreatingAsResourceManaged(proxy.tcti) }
            let location = try location(proxy.tcti, directory, "pace-\(mode)-\(index)")
            defer { Keychain.closeStore(location) }
            let keychain = try Keychain(service: "bench.pace", location: location)
            let face = SimulatedAuthenticator()
            func timed(_ path: String, _ body: () async throws -> Void) async throws {
                proxy.reset()
                let start = ContinuousClock.now
                try await body()
                let elapsed = ContinuousClock.now - start
                if index == 0 { paths.append(path) }
                commands[path] = proxy.commandCount
                times[path, default: []].append(elapsed)
            }
            try keychain.set("v", forKey: "plain")
            Keychain.closeStore(location)
            try await timed("cold open and a get") { _ = try keychain.string(forKey: "plain") }
            try await timed("set-passcode") { try KeychainDevice(location: location).setPasscode(passcode) }
            // The first write of the handle starts the rollback counter's epoch: timed on its own.
            try await timed("first write after the open") { try keychain.set("w", forKey: "first write") }
            try await timed("add a biometryCurrentSet item") {
                try await keychain.set(
                    "v", forKey: "bio", accessControl: try AccessControl(.whenUnlocked, flags: .biometryCurrentSet),
                    context: AuthenticationContext(authenticator: face, location: location))
            }
            try await timed("first get, biometryCurrentSet") {
                _ = try await keychain.get(
                    "bio", as: String.self, context: AuthenticationContext(authenticator: face, location: location))
            }
            try await keychain.set(
                "v", forKey: "pin", accessControl: try AccessControl(.whenUnlocked, flags: .devicePasscode))
            try await timed("first get, devicePasscode") {
                _ = try await keychain.get(
                    "pin", as: String.self,
                    context: AuthenticationContext(passcode: .fixed(passcode), location: location))
            }
            try KeychainDevice(location: location).lock()
            try await timed("unlock-keychain") { try KeychainDevice(location: location).unlock(passcode: passcode) }
        }
        PlotData.write(
            "cold-paths-\(mode)", header: ["path", "commands"] + profiles.map { $0?.name ?? "swtpm" },
            rows: paths.map { path in
                [path, String(commands[path] ?? 0)] + (times[path] ?? []).map { String($0.seconds * 1e3) }
            })
        print(
            "cold paths at the pace of each TPM, \(resourceManaged ? "behind a resource manager (/dev/tpmrm0)" : "sent directly (/dev/tpm0)") (one run each; the profiles are models):"
        )
        print("| Path | Commands | " + profiles.map { $0?.name ?? "swtpm" }.joined(separator: " | ") + " |")
        print("| --- | --- |" + String(repeating: " --- |", count: profiles.count))
        for path in paths {
            let cells = (times[path] ?? []).map {
                String(
                    format: "%.0f ms", Double($0.components.seconds) * 1e3 + Double($0.components.attoseconds) / 1e15)
            }
            print("| \(path) | \(commands[path] ?? 0) | " + cells.joined(separator: " | ") + " |")
        }
    }

    /// Runs async work from the synchronous benchmark driver and waits for it.
    private func blocking(_ body: @escaping @Sendable () async throws -> Void) throws {
        let semaphore = DispatchSemaphore(value: 0)
        nonisolated(unsafe) var failure: (any Error)?
        Task {
            do { try await body() } catch { failure = error }
            semaphore.signal()
        }
        semaphore.wait()
        if let failure { throw failure }
    }
}
