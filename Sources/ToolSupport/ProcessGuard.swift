import FoundationEssentials
import Synchronization
import SystemCalls
import TPM

#if canImport(Glibc)
import Glibc
#endif

/// What a command-line tool (`tpm-keychain`, `git-credential-tpm-keychain`) does to its own
/// process before it touches a secret: no core dumps, a crash that ends the process with its
/// signal, and cleanups (terminal echo, the embedded simulator's orderly shutdown) that run when
/// the user interrupts a command.
package enum ProcessGuard {
    static let interruptions = [SIGINT, SIGTERM, SIGHUP, SIGQUIT]
    static let crashes = [SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT, SIGTRAP, SIGSYS]

    /// The name that starts every diagnostic: set once by ``install(programName:)``.
    package static var programName: String { name.withLock { $0 } }
    private static let name = Locked("tpm-keychain")
    /// "<name>: terminated by a crash signal\n", made before any handler can run: a signal
    /// handler may not allocate.
    nonisolated(unsafe) private static var crashMessage: UnsafeMutableBufferPointer<UInt8>?

    /// Call first in `main`, once. Decrypted secrets live in this process's memory, so it never
    /// writes a core file. libcrypto, which only ESAPI uses here (in a private context), starts
    /// without its legacy name tables and openssl.cnf (``ESAPICryptoContext/startOpenSSLLean()``).
    package static func install(programName: String) {
        refuseUnreadableArguments(programName)
        ESAPICryptoContext.startOpenSSLLean()
        name.withLock { $0 = programName }
        let message = Array("\(programName): terminated by a crash signal\n".utf8)
        let buffer = UnsafeMutableBufferPointer<UInt8>.allocate(capacity: message.count)
        _ = buffer.initialize(from: message)
        crashMessage = buffer
        SecretMemory.disableCoreDumps()
        silenceTSSLogging()
        refuseUnusableOwnerPasswordFile()
        handleCrashes()
        handleInterruptions()
    }

    /// The variable that lets tpm-tss's own log through (`TSS2_LOG`), for debugging a TPM problem.
    package static let debugVariable = "TPM_KEYCHAIN_DEBUG"

    /// tpm2-tss logs what `TSS2_LOG` asks for to standard error, and at trace level that includes
    /// HMAC keys, session material and decrypted response parameters (git shows a helper's
    /// standard error). A tool turns it off, overriding an inherited value, unless
    /// `TPM_KEYCHAIN_DEBUG=1`; it says so when a level was asked for. Called while the process is
    /// still single-threaded, which setenv needs.
    private static func silenceTSSLogging() {
        guard getenv(debugVariable).map({ String(cString: $0) }) != "1" else { return }
        if let requested = getenv("TSS2_LOG").map({ String(cString: $0) }), requested.lowercased() != "all+none" {
            let note =
                "\(programName): note: TSS2_LOG=\(requested) ignored (tpm2-tss's log can show key material); set \(debugVariable)=1 to keep it\n"
            writeStandardError(note)
        }
        setenv("TSS2_LOG", "all+NONE", 1)
    }

    /// Without /proc (a chroot or container that does not mount it), the Swift runtime cannot
    /// find this process's arguments, which it locates through /proc/self/maps: `argc` is 0 and
    /// the command would run as if typed without any, or trap where it counts from 1. It stops
    /// here instead, saying what is missing (exit 69).
    private static func refuseUnreadableArguments(_ programName: String) {
        guard CommandLine.argc < 1 else { return }
        writeStandardError(
            "\(programName): this process's arguments cannot be read: /proc is not mounted (Swift finds them through /proc/self/maps)\n"
        )
        exit(ExitStatus.unavailable)
    }

    /// A `TPM_KEYCHAIN_OWNER_AUTH_FILE` that cannot be used (missing, a link, readable by others)
    /// ends the command at once, saying why, rather than every later owner operation failing
    /// for want of a password (exit 77).
    private static func refuseUnusableOwnerPasswordFile() {
        guard getenv(TPMConfiguration.ownerAuthorizationVariable) == nil,
            let path = getenv(TPMConfiguration.ownerAuthorizationFileVariable).map({ String(cString: $0) }),
            !path.isEmpty
        else { return }
        do {
            _ = try TPMConfiguration.ownerAuthorization(fromFile: path)
        } catch {
            writeStandardError("\(programName): \(TPMConfiguration.ownerAuthorizationFileVariable): \(error.message)\n")
            exit(ExitStatus.permissionDenied)
        }
    }

    /// The Swift runtime's crash reporter returns from a SIGSEGV it did not cause itself (one sent
    /// with kill), and the process then went on to exit 0 with its output cut short. This handler
    /// says one line and lets the signal's default action end the process, so the exit status
    /// reports the crash. Only async-signal-safe calls: write(2) and raise(3).
    private static func handleCrashes() {
        // A parent may have left them blocked (Foundation's Process passes its thread's mask on):
        // a blocked SIGABRT sent to a hung command would then never end it.
        var unblocked = sigset_t()
        sigemptyset(&unblocked)
        for signalNumber in crashes { sigaddset(&unblocked, signalNumber) }
        pthread_sigmask(SIG_UNBLOCK, &unblocked, nil)
        for signalNumber in crashes {
            var action = sigaction()
            action.__sigaction_handler.sa_handler = { received in
                if let message = ProcessGuard.crashMessage {
                    _ = write(STDERR_FILENO, message.baseAddress, message.count)
                }
                raise(received)
            }
            // RESETHAND: the default action is back on entry; NODEFER: raise() delivers at once.
            action.sa_flags = Int32(truncatingIfNeeded: SA_RESETHAND) | Int32(truncatingIfNeeded: SA_NODEFER)
            sigemptyset(&action.sa_mask)
            sigaction(signalNumber, &action, nil)
        }
    }

    // MARK: Interruptions

    private static let cleanups = Locked<[Int: @Sendable () -> Void]>([:])
    private static let nextToken = Atomic<Int>(0)
    /// The handler writes the signal number here; a thread reads it and does the real work.
    nonisolated(unsafe) private static var pipeWriteEnd: Int32 = -1

    /// Runs `cleanup` if the process is interrupted (SIGINT, SIGTERM, SIGHUP, SIGQUIT) before
    /// ``remove(_:)`` is called with the returned token.
    package static func onInterruption(_ cleanup: @escaping @Sendable () -> Void) -> Int {
        let token = nextToken.add(1, ordering: .relaxed).newValue
        cleanups.withLock { $0[token] = cleanup }
        return token
    }

    /// Runs `serve` (a server's loop) until it returns; a termination signal calls `stop` (from
    /// the guard's thread), and then this waits, never returning, while the guard's thread ends
    /// the process with that signal once every cleanup is done: returning would let the process
    /// exit 0 before them, with its socket perhaps still there.
    package static func serveUntilInterrupted(stop: @escaping @Sendable () -> Void, _ serve: () -> Void) {
        let interrupted = Locked(false)
        let token = onInterruption {
            interrupted.withLock { $0 = true }
            stop()
        }
        defer { remove(token) }
        serve()
        if interrupted.withLock({ $0 }) {
            while true { pause() }
        }
    }

    package static func remove(_ token: Int) {
        cleanups.withLock { _ = $0.removeValue(forKey: token) }
    }

    /// A signal handler may only do async-signal-safe work, and stopping a simulator in order
    /// (TPM2_Shutdown, so the TPM counts no dictionary-attack failure) is not: the handler only
    /// writes to a pipe, and a thread runs the cleanups, then ends the process with the signal.
    private static func handleInterruptions() {
        var ends: [Int32] = [0, 0]
        guard pipe(&ends) == 0 else { return }
        // No other thread spawns children this early, so setting FD_CLOEXEC afterwards is safe.
        for end in ends { _ = fcntl(end, F_SETFD, FD_CLOEXEC) }
        pipeWriteEnd = ends[1]
        let readEnd = ends[0]
        // A plain pthread, not Foundation's Thread, whose first start sets up Foundation's
        // threading (about 1.7 ms of a CLI lookup, measured). Detached: it ends only by ending
        // the process, or when the pipe fails, and then nothing waits for it.
        do {
            try DetachedThread.start {
                var received: Int32 = 0
                while read(readEnd, &received, MemoryLayout<Int32>.size) != MemoryLayout<Int32>.size {
                    if errno != EINTR { return }
                }
                let pending = cleanups.withLock { cleanups in
                    defer { cleanups.removeAll() }
                    return Array(cleanups.values)
                }
                for cleanup in pending { cleanup() }
                signal(received, SIG_DFL)
                var set = sigset_t()
                sigemptyset(&set)
                sigaddset(&set, received)
                pthread_sigmask(SIG_UNBLOCK, &set, nil)
                raise(received)
            }
        } catch {
            // No thread to run the cleanups: the signals keep their default actions.
            pipeWriteEnd = -1
            for end in ends { close(end) }
            return
        }
        var unblocked = sigset_t()
        sigemptyset(&unblocked)
        for signalNumber in interruptions {
            // Respect an ignored signal (nohup, background jobs): the user asked for no interruption.
            var previous = sigaction()
            sigaction(signalNumber, nil, &previous)
            if unsafeBitCast(previous.__sigaction_handler.sa_handler, to: Int.self)
                == unsafeBitCast(SIG_IGN, to: Int.self)
            {
                continue
            }
            var action = sigaction()
            action.__sigaction_handler.sa_handler = { received in
                var number = received
                _ = write(ProcessGuard.pipeWriteEnd, &number, MemoryLayout<Int32>.size)
            }
            action.sa_flags = Int32(SA_RESTART)
            sigemptyset(&action.sa_mask)
            sigaction(signalNumber, &action, nil)
            sigaddset(&unblocked, signalNumber)
        }
        // A parent may have left these blocked (children of threads often inherit such a mask);
        // then an interrupt would wait for the password, or never come.
        pthread_sigmask(SIG_UNBLOCK, &unblocked, nil)
    }
}
