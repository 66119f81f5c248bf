import Foundation
import SystemCalls
import Testing

@testable import TPMSimulator

#if canImport(Glibc)
import Glibc
#endif

@Suite("SoftwareTPM")
struct SoftwareTPMTests {
    @Test("start runs swtpm that answers; stop ends it, reaps it and removes the private state")
    func startAndStop() throws {
        let tpm = try SoftwareTPM.start()
        let pid = tpm.processID
        let directory = tpm.stateDirectory
        #expect(processExists(pid).exists)
        #expect(tpm.isRunning)
        #expect(tpm.controlPort == tpm.port + 1)
        #expect(tpm.tcti == "swtpm:host=127.0.0.1,port=\(tpm.port)")
        #expect(FileManager.default.fileExists(atPath: directory + "/tpm2-00.permall"))
        var mode = stat()
        #expect(stat(directory, &mode) == 0 && mode.st_mode & 0o777 == 0o700)

        let response = try getRandom(tpm)
        #expect(response.responseCode == 0)
        #expect(response.bytes.count == 10 + 2 + 8) // header, TPM2B size, 8 random bytes

        tpm.stop()
        let after = processExists(pid)
        #expect(!after.exists)
        #expect(after.error == ESRCH)
        #expect(!tpm.isRunning)
        #expect(!FileManager.default.fileExists(atPath: directory))
        tpm.stop() // idempotent
        #expect(throws: SoftwareTPMError.self) { try getRandom(tpm) }
        let error = #expect(throws: SoftwareTPMError.self) { try tpm.powerCycle() }
        #expect(error?.code == .notRunning)
    }

    @Test("on a Unix socket: a private 0700 directory, no TCP socket at all, tpm2-tools talk to it, stop removes it")
    func unixSocket() throws {
        let tpm = try SoftwareTPM.start(.init(listensOnUnixSocket: true))
        let socket = try #require(tpm.socketPath)
        let directory = (socket as NSString).deletingLastPathComponent
        #expect(tpm.tcti == "swtpm:path=\(socket)")
        #expect(tpm.port == 0)
        var status = stat()
        #expect(lstat(directory, &status) == 0)
        #expect(status.st_mode & 0o777 == 0o700 && status.st_uid == getuid())
        #expect(try getRandom(tpm).responseCode == 0)
        #expect(try runToolExpectingSuccess(["tpm2_getrandom", "--hex", "8"], tcti: tpm.tcti).count == 16)
        // None of swtpm's sockets is a TCP one: other local users cannot reach it.
        let tcpInodes = try ["/proc/net/tcp", "/proc/net/tcp6"].flatMap { path in
            try String(contentsOfFile: path, encoding: .utf8).split(separator: "\n").dropFirst()
                .compactMap {
                    $0.split(separator: " ", omittingEmptySubsequences: true).dropFirst(9).first.map(String.init)
                }
        }
        let socketInodes = try FileManager.default.contentsOfDirectory(atPath: "/proc/\(tpm.processID)/fd").compactMap {
            fd in
            (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\(tpm.processID)/fd/\(fd)"))
                .flatMap { $0.hasPrefix("socket:[") ? String($0.dropFirst(8).dropLast()) : nil }
        }
        #expect(socketInodes.count >= 2, "\(socketInodes)")
        #expect(Set(socketInodes).isDisjoint(with: tcpInodes))
        tpm.stop()
        #expect(!FileManager.default.fileExists(atPath: directory))
    }

    @Test("two simulators run side by side on distinct ports")
    func twoInstances() throws {
        let first = try SoftwareTPM.start()
        defer { first.stop() }
        let second = try SoftwareTPM.start()
        defer { second.stop() }
        #expect(Set([first.port, first.controlPort]).isDisjoint(with: [second.port, second.controlPort]))
        #expect(first.processID != second.processID)
        #expect(first.stateDirectory != second.stateDirectory)
        for tpm in [first, second] {
            let output = try runToolExpectingSuccess(["tpm2_getrandom", "8", "--hex"], tcti: tpm.tcti)
            #expect(output.count == 16)
        }
    }

    @Test("a persistent state directory keeps the TPM's NVRAM across restarts")
    func persistentState() throws {
        let directory = makeScratchPath("persistent")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let context = directory + "/primary.ctx"

        let first = try SoftwareTPM.start(.init(stateDirectory: directory))
        #expect(first.stateDirectory == directory)
        try runToolExpectingSuccess(["tpm2_createprimary", "-G", "ecc", "-c", context], tcti: first.tcti)
        try runToolExpectingSuccess(["tpm2_evictcontrol", "-c", context, "0x81000001"], tcti: first.tcti)
        first.stop()

        #expect(FileManager.default.fileExists(atPath: directory + "/tpm2-00.permall"))
        var mode = stat()
        #expect(stat(directory, &mode) == 0 && mode.st_mode & 0o777 == 0o700)

        let second = try SoftwareTPM.start(.init(stateDirectory: directory))
        defer { second.stop() }
        #expect(second.port != 0)
        let handles = try runToolExpectingSuccess(["tpm2_getcap", "handles-persistent"], tcti: second.tcti)
        #expect(handles.contains("0x81000001"))
        second.stop()
        #expect(FileManager.default.fileExists(atPath: directory + "/tpm2-00.permall"))
    }

    @Test(
        "a state directory another swtpm still holds (a killed process's, until its watchdog ends it) is waited for, not a launch failure"
    )
    func waitsForAHeldStateDirectory() throws {
        let directory = makeScratchPath("held")
        try FileManager.default.createDirectory(
            atPath: directory, withIntermediateDirectories: false, attributes: [.posixPermissions: 0o700])
        defer { try? FileManager.default.removeItem(atPath: directory) }
        // The holder: a swtpm of its own on the directory, as a killed process leaves one behind.
        let holder = try ChildProcess.spawn(
            executablePath: try #require(ChildProcess.resolveExecutable("swtpm")),
            arguments: [
                "socket", "--tpm2", "--server", "type=unixio,path=\(directory)/holder.socket", "--tpmstate",
                "dir=\(directory)", "--flags", "not-need-init,startup-clear",
            ], standardInput: .devNull, standardErrorPath: nil)
        var holderRunning = true
        defer { if holderRunning { ChildProcess.killAndReap(holder) } }
        // It holds the state's lock once it listens.
        let listening = ContinuousClock.now + .seconds(60)
        while !FileManager.default.fileExists(atPath: directory + "/holder.socket"), ContinuousClock.now < listening {
            usleep(10_000)
        }
        #expect(FileManager.default.fileExists(atPath: directory + "/holder.socket"))

        // On a Unix socket, as a store's own simulator listens.
        let started = Locked<Result<SoftwareTPM, SoftwareTPMError>?>(nil)
        let starter = try JoinableThread {
            let result = Result { () throws(SoftwareTPMError) in
                try SoftwareTPM.start(.init(stateDirectory: directory, listensOnUnixSocket: true))
            }
            started.withLock { $0 = result }
        }
        // The starter met the held lock (swtpm said so), and is still waiting: then the holder goes.
        let log = directory + "/" + SimulatorProcess.stderrFileName
        let refused = ContinuousClock.now + .seconds(60)
        while ((try? String(contentsOfFile: log, encoding: .utf8)) ?? "").contains(SimulatorProcess.stateLockedMessage)
            == false, started.withLock({ $0 == nil }), ContinuousClock.now < refused
        {
            usleep(5_000)
        }
        #expect(
            started.withLock { $0 == nil }, "the start ended while the state was held: \(String(describing: started))")
        ChildProcess.killAndReap(holder)
        holderRunning = false
        starter.join()
        let tpm = try #require(try started.withLock { $0 }?.get())
        defer { tpm.stop() }
        #expect(try getRandom(tpm).responseCode == 0)
    }

    @Test("powerCycle keeps the TPM answering, drops transient objects and counts no DA failure")
    func powerCycle() throws {
        let tpm = try SoftwareTPM.start()
        defer { tpm.stop() }
        let context = tpm.stateDirectory + "/primary.ctx"
        try runToolExpectingSuccess(["tpm2_createprimary", "-G", "ecc", "-c", context], tcti: tpm.tcti)
        #expect(try transientHandles(tpm) == ["0x80000000"])

        try tpm.powerCycle()

        #expect(try transientHandles(tpm).isEmpty)
        #expect(try getRandom(tpm).responseCode == 0)
        #expect(try variableProperties(tpm)["TPM2_PT_LOCKOUT_COUNTER"] == "0x0")
        // And again: the sequence leaves the TPM in a state from which it can be repeated.
        try tpm.powerCycle()
        #expect(try getRandom(tpm).responseCode == 0)
    }

    @Test("the watchdog kills swtpm when this process's end of the pipe closes")
    func watchdogKillsOrphanedSimulator() throws {
        let tpm = try SoftwareTPM.start()
        defer { tpm.stop() }
        let pid = tpm.processID
        #expect(processExists(pid).exists)

        tpm.simulateParentDeathForTesting()

        #expect(tpm.waitForSimulatorExitForTesting(timeout: .seconds(5)))
        let after = processExists(pid)
        #expect(!after.exists && after.error == ESRCH)
        #expect(!tpm.isRunning)
        tpm.stop() // still tidies up the watchdog and the state directory
        #expect(!FileManager.default.fileExists(atPath: tpm.stateDirectory))
    }

    @Test("a missing swtpm binary is a typed error that names the package")
    func executableNotFound() throws {
        let error = #expect(throws: SoftwareTPMError.self) {
            try SoftwareTPM.start(.init(executable: "swtpm-does-not-exist-\(UUID().uuidString)"))
        }
        #expect(error?.code == .executableNotFound)
        #expect(error?.message.contains("\"swtpm\"") == true)
    }

    @Test("a binary that exits at once is a launch failure carrying its stderr")
    func launchFailureReportsStderr() throws {
        // `false` exits immediately with no output; swtpm's own stderr is covered by the path.
        let error = #expect(throws: SoftwareTPMError.self) {
            try SoftwareTPM.start(.init(executable: "/bin/false", startupTimeout: .seconds(5)))
        }
        #expect(error?.code == .launchFailed)
        #expect(error?.message.contains("swtpm exited during startup") == true)
    }

    /// Launches swtpm with `taken` handed out as its first pair, as if another process had won
    /// the race for it, and fresh pairs after that; runs `check` with the launched process and
    /// every port handed out, then stops it.
    private func launchHandingOutFirst(
        _ taken: Int, _ name: String,
        check: (SimulatorProcess, [Int]) throws -> Void
    ) throws {
        let directory = makeScratchPath(name)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        #expect(mkdir(directory, 0o700) == 0)
        var handedOut: [Int] = []
        let process = try SimulatorProcess.launch(
            executablePath: try #require(ChildProcess.resolveExecutable("swtpm")), stateDirectory: directory,
            ownsStateDirectory: false,
            timeout: .seconds(10),
            choosePorts: { () throws(Errno) -> Int in
                let port = handedOut.isEmpty ? taken : try LoopbackSocket.reserveConsecutivePorts()
                handedOut.append(port)
                return port
            })
        defer {
            process.watchdog.disarm()
            SimulatorProcess.terminate(pid: process.pid, endpoint: process.endpoint, orderly: true)
        }
        try check(process, handedOut)
    }

    @Test("a port lost to another process is retried with fresh ports")
    func portConflictIsRetried() throws {
        // A pair that is bound (and accepts nothing).
        let taken = try LoopbackSocket.listenOnConsecutivePorts()
        defer {
            closeDescriptor(taken.first)
            closeDescriptor(taken.second)
        }
        try launchHandingOutFirst(taken.port, "conflict") { (process, handedOut) throws in
            #expect(handedOut.count == 2)
            #expect(process.port == handedOut.last)
            #expect(process.port != taken.port)
            #expect(
                try TPMTransport.transmit(
                    RandomNumberGeneratorCommands.getRandom(byteCount: 8), endpoint: process.endpoint,
                    timeout: .seconds(5)
                ).responseCode == 0)
        }
    }

    @Test(
        "ports another swtpm already serves are never taken for ours: launch retries rather than adopt the one that answers"
    )
    func anotherSimulatorIsNeverAdopted() throws {
        let other = try SoftwareTPM.start()
        defer { other.stop() }
        try launchHandingOutFirst(other.port, "adopt") { (process, handedOut) throws in
            #expect(process.port != other.port, "adopted the other simulator")
            #expect(handedOut.count == 2)
            #expect(kill(process.pid, 0) == 0, "our swtpm is not running")
        }
    }

    @Test("a process that never answers times out and is terminated")
    func startupTimeout() throws {
        let script = makeScratchPath("silent") + ".sh"
        defer { try? FileManager.default.removeItem(atPath: script) }
        try "#!/bin/sh\nexec sleep 30\n".write(toFile: script, atomically: true, encoding: .utf8)
        #expect(chmod(script, 0o700) == 0)
        let started = ContinuousClock.now
        let error = #expect(throws: SoftwareTPMError.self) {
            try SoftwareTPM.start(.init(executable: script, startupTimeout: .milliseconds(300)))
        }
        #expect(error?.code == .startupTimedOut)
        #expect(ContinuousClock.now - started < .seconds(5))
        // The timed-out child was reaped: no `sleep 30` of ours is left.
        #expect(try runTool(["pgrep", "-f", "-P", "\(getpid())", "sleep 30"], tcti: "").status != 0)
    }

    @Test("dictionary-attack parameters can be set and the lockout reset")
    func dictionaryAttack() throws {
        let tpm = try SoftwareTPM.start()
        defer { tpm.stop() }
        let before = try variableProperties(tpm)
        #expect(before["TPM2_PT_MAX_AUTH_FAIL"] == "0x3")

        try tpm.setDictionaryAttackParameters(maxTries: 7, recoveryTime: 120, lockoutRecovery: 60)
        let after = try variableProperties(tpm)
        #expect(after["TPM2_PT_MAX_AUTH_FAIL"] == "0x7")
        #expect(after["TPM2_PT_LOCKOUT_INTERVAL"] == "0x78")
        #expect(after["TPM2_PT_LOCKOUT_RECOVERY"] == "0x3C")

        try tpm.resetDictionaryAttackLockout()
        #expect(try variableProperties(tpm)["TPM2_PT_LOCKOUT_COUNTER"] == "0x0")
    }

    @Test("a refused TPM command surfaces its response code")
    func commandFailure() throws {
        let tpm = try SoftwareTPM.start()
        defer { tpm.stop() }
        try runToolExpectingSuccess(["tpm2_changeauth", "-c", "lockout", "secret"], tcti: tpm.tcti)
        let error = #expect(throws: SoftwareTPMError.self) { try tpm.resetDictionaryAttackLockout() }
        guard case .commandFailed(let code)? = error?.code else {
            Issue.record("expected commandFailed, got \(String(describing: error))")
            return
        }
        #expect(code == 0x98E) // TPM_RC_AUTH_FAIL for session 1: the empty password no longer fits
    }
}

@Suite("TPM command marshalling")
struct CommandMarshallingTests {
    @Test("fixed commands match their known byte strings")
    func knownBytes() {
        #expect(StartupCommands.startupClear() == [0x80, 0x01, 0, 0, 0, 0x0C, 0, 0, 0x01, 0x44, 0, 0])
        #expect(StartupCommands.shutdownClear() == [0x80, 0x01, 0, 0, 0, 0x0C, 0, 0, 0x01, 0x45, 0, 0])
        #expect(
            RandomNumberGeneratorCommands.getRandom(byteCount: 8) == [
                0x80, 0x01, 0, 0, 0, 0x0C, 0, 0, 0x01, 0x7B, 0, 8,
            ])
        #expect(
            DictionaryAttackCommands.lockReset() == [
                0x80, 0x02, 0, 0, 0, 27, 0, 0, 0x01, 0x39,
                0x40, 0, 0, 0x0A,
                0, 0, 0, 9, 0x40, 0, 0, 0x09, 0, 0, 0, 0, 0,
            ])
        let parameters = DictionaryAttackCommands.parameters(maxTries: 1, recoveryTime: 2, lockoutRecovery: 3)
        #expect(parameters.count == 39)
        #expect(Array(parameters[2..<10]) == [0, 0, 0, 39, 0, 0, 0x01, 0x3A])
        #expect(Array(parameters.suffix(12)) == [0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0, 3])
    }
}
