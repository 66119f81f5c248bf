// Starting and stopping one swtpm child: port selection with retry, readiness probing, and the
// escalating stop sequence. SoftwareTPM.swift holds the public API over this.

import FoundationEssentials
import SystemCalls
import WireFormat

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// A swtpm child that answered its first TPM command.
struct SimulatorProcess: Sendable {
    let pid: pid_t
    let endpoint: SimulatorEndpoint
    let watchdog: Watchdog
    /// Whether it saves its state when stopped and resumes it when started (see
    /// ``SoftwareTPM/Configuration/resumesAcrossRuns``).
    var resumes = false

    /// The TCP command port; 0 on Unix sockets.
    var port: Int {
        if case .tcp(let port) = endpoint { return port }
        return 0
    }

    static let stderrFileName = "swtpm.stderr.log"
    /// Port conflicts are a race with unrelated processes; a handful of fresh pairs is plenty.
    static let maximumPortAttempts = 5
    /// What swtpm says when another swtpm holds its state directory's lock file.
    static let stateLockedMessage = "Could not lock access to lockfile"

    /// Spawns swtpm on fresh consecutive loopback ports and waits until it answers
    /// TPM2_GetRandom, retrying with new ports when swtpm lost a port to another process.
    ///
    /// - Throws: `SoftwareTPMError` with `.launchFailed` (spawn failure, early exit: message
    ///   carries swtpm's stderr) or `.startupTimedOut`.
    /// - Parameter choosePorts: where port pairs come from; tests substitute a taken pair.
    /// - Parameter socketDirectory: listen on Unix sockets in this private directory instead of
    ///   TCP ports; it is removed with the simulator, also by the watchdog.
    static func launch(
        executablePath: String,
        stateDirectory: String,
        ownsStateDirectory: Bool,
        socketDirectory: String? = nil,
        timeout: Duration,
        resumes: Bool = false,
        choosePorts: () throws(Errno) -> Int = LoopbackSocket.reserveConsecutivePorts
    ) throws(SoftwareTPMError) -> SimulatorProcess {
        let deadline = ContinuousClock.now + timeout
        let stderrPath = stateDirectory + "/" + stderrFileName
        var conflicts: [String] = []
        var removedWithSimulator = ownsStateDirectory ? [stateDirectory] : []
        if let socketDirectory { removedWithSimulator.append(socketDirectory) }
        var portAttempts = 0
        while portAttempts < maximumPortAttempts {
            portAttempts += 1
            let endpoint: SimulatorEndpoint
            if let socketDirectory {
                endpoint = .unixSocket(directory: socketDirectory)
            } else {
                do {
                    endpoint = .tcp(port: try choosePorts())
                } catch {
                    throw SoftwareTPMError(
                        .launchFailed, "no two consecutive free loopback ports for swtpm", cause: error)
                }
            }
            let pid: pid_t
            do {
                pid = try ChildProcess.spawn(
                    executablePath: executablePath,
                    arguments: arguments(endpoint: endpoint, stateDirectory: stateDirectory, resumes: resumes),
                    standardInput: .devNull,
                    standardErrorPath: stderrPath)
            } catch {
                throw SoftwareTPMError(.launchFailed, "cannot spawn \(executablePath)", cause: error)
            }
            let watchdog: Watchdog
            do {
                watchdog = try Watchdog.guarding(pid, removing: removedWithSimulator)
            } catch {
                ChildProcess.killAndReap(pid)
                throw SoftwareTPMError(
                    .launchFailed, "cannot spawn the /bin/sh watchdog that guards swtpm", cause: error)
            }

            switch waitUntilReady(pid: pid, endpoint: endpoint, deadline: deadline, resumes: resumes) {
            case .ready:
                return SimulatorProcess(pid: pid, endpoint: endpoint, watchdog: watchdog, resumes: resumes)
            case .exited:
                watchdog.disarm()
                let output = stderrTail(stderrPath)
                if output.contains("Address already in use"), case .tcp(let port) = endpoint {
                    conflicts.append("ports \(port)/\(port + 1)")
                    continue
                }
                // Another swtpm holds the state directory: one whose process was killed, which
                // its watchdog is about to end (a store's simulator lock, released at that
                // process's death, keeps every live process of ours out of a state directory in
                // use). Wait for it until the deadline, rather than fail the open in that window.
                if output.contains(stateLockedMessage), ContinuousClock.now < deadline {
                    portAttempts -= 1
                    sleep(for: .milliseconds(20))
                    continue
                }
                throw SoftwareTPMError(
                    .launchFailed,
                    "swtpm exited during startup (state directory \(stateDirectory)). swtpm said:\n\(output)")
            case .timedOut(let lastProblem):
                watchdog.disarm()
                terminate(pid: pid, endpoint: endpoint, orderly: false)
                throw SoftwareTPMError(
                    .startupTimedOut,
                    "swtpm (pid \(pid), \(endpoint.description)) did not answer TPM2_GetRandom within \(timeout); last problem: \(lastProblem). swtpm said:\n\(stderrTail(stderrPath))"
                )
            }
        }
        throw SoftwareTPMError(
            .launchFailed,
            "swtpm lost its ports to other processes \(maximumPortAttempts) times (\(conflicts.joined(separator: ", "))); the machine is short of free loopback ports"
        )
    }

    static func arguments(endpoint: SimulatorEndpoint, stateDirectory: String, resumes: Bool = false) -> [String] {
        ["socket", "--tpm2"] + endpoint.serverArguments + [
            "--tpmstate", "dir=\(stateDirectory)",
            // Power on and TPM2_Startup by itself, like firmware does on real hardware: SU_CLEAR
            // (a boot), or SU_STATE (a resume), which fails on a state that was not saved; the
            // readiness probe then boots it.
            "--flags", resumes ? "not-need-init,startup-state" : "not-need-init,startup-clear",
            "--pid", "file=\(stateDirectory)/swtpm.pid",
        ]
    }

    private enum Readiness {
        case ready
        case exited
        case timedOut(lastProblem: String)
    }

    private static func waitUntilReady(
        pid: pid_t, endpoint: SimulatorEndpoint, deadline: ContinuousClock.Instant, resumes: Bool
    ) -> Readiness {
        var lastProblem = "nothing tried yet"
        while true {
            if ChildProcess.reapIfExited(pid) { return .exited }
            do {
                let response = try TPMTransport.transmit(
                    RandomNumberGeneratorCommands.getRandom(byteCount: 8), endpoint: endpoint, timeout: .seconds(1))
                // Another swtpm may serve the port we were handed (it bound it between our release and
                // our child's bind): an answer counts only once the kernel says our child listens there.
                if response.responseCode == 0, case .tcp(let port) = endpoint,
                    PortOwner.isListening(pid: pid, port: port) == false
                {
                    lastProblem = "port \(port) is served by another process"
                } else if response.responseCode == 0 {
                    return .ready
                } else if resumes && response.responseCode == TPMConstant.notInitialized {
                    // No saved state to resume (a new TPM, or one stopped without an orderly
                    // shutdown): a boot instead, as a machine that lost power reboots.
                    let startup = try TPMTransport.transmit(
                        StartupCommands.startupClear(), endpoint: endpoint, timeout: .seconds(1))
                    lastProblem =
                        "TPM2_Startup(SU_STATE) found no saved state; TPM2_Startup(SU_CLEAR) answered TPM_RC 0x\(String(startup.responseCode, radix: 16))"
                } else {
                    lastProblem = "TPM2_GetRandom answered TPM_RC 0x\(String(response.responseCode, radix: 16))"
                }
            } catch {
                lastProblem = error.message
            }
            if ContinuousClock.now >= deadline {
                // The child may have died during the last probe: report that rather than a timeout.
                return ChildProcess.reapIfExited(pid) ? .exited : .timedOut(lastProblem: lastProblem)
            }
            sleep(for: .milliseconds(10))
        }
    }

    /// Stops swtpm and always reaps it. Orderly first (TPM2_Shutdown so no DA failure is
    /// counted on the next start of a persistent state; CMD_SHUTDOWN so swtpm saves and exits),
    /// then SIGTERM, then SIGKILL.
    static func terminate(pid: pid_t, endpoint: SimulatorEndpoint, orderly: Bool, resumes: Bool = false) {
        if ChildProcess.reapIfExited(pid) { return }
        if orderly {
            let shutdown = resumes ? StartupCommands.shutdownState() : StartupCommands.shutdownClear()
            _ = try? TPMTransport.transmit(shutdown, endpoint: endpoint, timeout: .seconds(1))
            _ = try? TPMTransport.control(.shutdown, endpoint: endpoint, timeout: .seconds(1))
            if ChildProcess.waitForExit(pid, timeout: .seconds(2)) { return }
        }
        _ = kill(pid, SIGTERM)
        if ChildProcess.waitForExit(pid, timeout: .seconds(1)) { return }
        ChildProcess.killAndReap(pid)
    }

    /// The last part of swtpm's stderr, for error messages.
    static func stderrTail(_ path: String, limit: Int = 2000) -> String {
        guard let data = FileManager.default.contents(atPath: path), !data.isEmpty else {
            return "(no output)"
        }
        let text = String(decoding: data.suffix(limit), as: UTF8.self)
        return text.trimmingWhitespace()
    }
}
