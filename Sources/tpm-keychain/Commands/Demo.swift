import ArgumentParser
import CommandLineSupport
import FoundationEssentials
import TPM
import TPMKeychain
import TPMKeychainFprintd
import ToolSupport

#if canImport(Glibc)
import Glibc
#endif

/// The CLI at work on this machine's TPM (or a simulated one, said out loud): a short transcript
/// of the `security`-style verbs on a demo store, each step timed.
struct Demo: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract:
            "Run the keychain verbs on a demo store and time each step, including the TPM unseal of the master key.")

    @Option(name: .long, help: ArgumentHelp("The demo store's directory.", valueName: "dir"), completion: .directory)
    var keychain: String = KeychainLocation.dataDirectory + "/demo"

    @Flag(help: "Use the simulated Face ID even when a fingerprint reader with your fingers is there.")
    var simulatedBiometry = false

    static let service = "com.example.tpm-keychain.demo"
    static let account = "alice"
    /// Public on purpose: the demo prints it back, so it must never be a real secret.
    static let password = "correct horse battery staple"

    func run() throws {
        try reportingErrors {
            let path = StoreDirectory.absolute(keychain)
            let session = try StoreSession(path: path, announceSimulation: false)
            defer { session.close() }
            try describeTPM(session.tpm)

            let existed = try KeychainLocation(path: path).storeExists
            var elapsed = Duration.zero
            let count = try measured(&elapsed) { try Keychain.allItems(in: session.location).count }
            print("store:        \(path)")
            if existed {
                print(
                    "open store:   \(milliseconds(elapsed))  (the TPM unseals the master key; \(count) item\(count == 1 ? "" : "s") in the store)"
                )
            } else {
                print("create store: \(milliseconds(elapsed))  (a new 32-byte master key, sealed to the TPM)")
            }
            // An interrupted earlier run may have left the demo item behind.
            if try Keychain(service: Self.service, location: session.location).acting(for: .cli).remove(Self.account) {
                print("              (removed the demo item an interrupted earlier run left behind)")
            }

            print("\n$ STORE=\(shellQuoted(path))")
            let store = ["--keychain", path]
            try step(
                AddGenericPassword.self, ["add-generic-password"], store,
                [
                    "-s", Self.service, "-a", Self.account, "-l", "Demo login", "-j", "added by tpm-keychain demo",
                    "-w", Self.password,
                ]
            ) { command, output in
                try command.perform(in: session, value: .text(Self.password))
                output("(no output: added; the password above is a public demo value)")
            }
            try step(
                FindGenericPassword.self, ["find-generic-password"], store,
                ["-s", Self.service, "-a", Self.account, "-w"]
            ) { command, output in
                try command.perform(in: session) { output($0 + "    (the public demo value, not a secret)") }
            }
            try step(
                FindGenericPassword.self, ["find-generic-password"], store, ["-s", Self.service, "-a", Self.account]
            ) {
                try $0.perform(in: session, output: $1)
            }
            try step(DumpKeychain.self, ["dump-keychain"], store, []) { try $0.perform(in: session, output: $1) }
            try step(
                DeleteGenericPassword.self, ["delete-generic-password"], store,
                ["-s", Self.service, "-a", Self.account]
            ) {
                try $0.perform(in: session, output: $1)
            }
            if let reader = realReader() {
                try fingerprint(session, store: store, reader: reader)
            } else {
                try biometry(session, store: store)
            }

            Keychain.closeStore(session.location)
            _ = try measured(&elapsed) { try Keychain.allItems(in: session.location) }
            print(
                "\nreopen store: \(milliseconds(elapsed))  (keys erased from memory, then the master key unsealed by the TPM again)"
            )
            if session.isSimulated {
                print("note: this TPM is SIMULATED; on a machine with a TPM the store would be bound to its hardware")
            }
        }
    }

    /// A biometryCurrentSet item read after a (simulated) Face ID match, the enrollment changed,
    /// and the same item then refused by the TPM: the PolicyNV on the enrollment counter no
    /// longer holds.
    private func biometry(_ session: StoreSession, store: [String]) throws {
        let face = DemoFace()
        let context = AuthenticationContext(
            authenticator: face, passcode: nil, applicationIdentifier: "tpm-keychain demo",
            location: session.location)
        context.localizedReason = "show the demo item"
        let account = "face-id-protected"
        _ = try? Keychain(service: Self.service, location: session.location).acting(for: .cli).remove(account)
        let device = KeychainDevice(location: session.location)
        print("\n# Access control: an item bound to the current (SIMULATED) Face ID enrollment")
        try step(
            AddGenericPassword.self, ["add-generic-password"], store,
            [
                "-s", Self.service, "-a", account, "--access-control", "biometryCurrentSet", "--accessible",
                "whenUnlockedThisDeviceOnly",
                "-w", Self.password,
            ]
        ) { command, output in
            try command.perform(in: session, value: .text(Self.password), context: context)
            output(
                "(added; its key record is sealed under PolicyNV(enrollment counter = \(try device.status().enrollmentCounter ?? 0)))"
            )
        }
        try step(FindGenericPassword.self, ["find-generic-password"], store, ["-s", Self.service, "-a", account, "-w"])
        { command, output in
            try command.perform(in: session, context: context) { output($0 + "    (after a simulated Face ID match)") }
            output("(\(face.attempts) biometric prompt; the TPM released the record key)")
        }
        face.reenroll()
        print("# The Face ID enrollment changes (simulated re-enrollment)")
        try step(FindGenericPassword.self, ["find-generic-password"], store, ["-s", Self.service, "-a", account, "-w"])
        { command, output in
            do {
                try command.perform(in: session, context: context) { output($0) }
                throw CommandFailure(ExitStatus.software, "the item was still readable after the enrollment changed")
            } catch let error as KeychainError where error.code == .itemInvalidated {
                output("refused: \(error.message)")
                output(
                    "(enrollment counter now \(try device.status().enrollmentCounter ?? 0): the TPM's PolicyNV fails for good; a read keeps the item, which another device could still open)"
                )
            }
        }
        print("# Removing what can never open again on this device, proven by the TPM's counter")
        print("$ tpm-keychain purge-invalidated --keychain \"$STORE\"")
        let purge = try session.location.purgeInvalidatedItems()
        print("purged: \(purge.items) item and \(purge.keyRecords) key record")
    }

    /// fprintd with a reader and this user's fingers, when a person is at the terminal to touch
    /// it (and the simulated face was not asked for); nil otherwise, saying why.
    private func realReader() -> FprintdAuthenticator? {
        guard !simulatedBiometry else { return nil }
        guard isatty(STDIN_FILENO) == 1 else {
            print("\n(biometry: SIMULATED Face ID; nobody at a terminal to touch a fingerprint reader)")
            return nil
        }
        let reader = FprintdAuthenticator(timeout: .seconds(20))
        do {
            guard try waitFor({ try await reader.enrollment() }) != nil else {
                print("\n(biometry: SIMULATED Face ID; fprintd has a reader, but none of your fingers is enrolled)")
                return nil
            }
            return reader
        } catch {
            let reason = (error as? AuthenticationError)?.message ?? "\(error)"
            print("\n(biometry: SIMULATED Face ID; no fingerprint reader through fprintd: \(reason))")
            return nil
        }
    }

    /// A biometryCurrentSet item read with the person's own finger on the machine's reader,
    /// through fprintd; the enrollment is theirs, so the demo does not change it.
    private func fingerprint(_ session: StoreSession, store: [String], reader: FprintdAuthenticator) throws {
        let context = AuthenticationContext(
            authenticator: reader, passcode: nil, applicationIdentifier: "tpm-keychain demo", location: session.location
        )
        context.localizedReason = "show the demo item"
        let account = "fingerprint-protected"
        _ = try? Keychain(service: Self.service, location: session.location).acting(for: .cli).remove(account)
        let device = KeychainDevice(location: session.location)
        print(
            "\n# Access control: an item bound to your enrolled fingerprints (this machine's REAL reader, through fprintd)"
        )
        try step(
            AddGenericPassword.self, ["add-generic-password"], store,
            [
                "-s", Self.service, "-a", account, "--access-control", "biometryCurrentSet", "--accessible",
                "whenUnlockedThisDeviceOnly", "-w", Self.password,
            ]
        ) { command, output in
            try command.perform(in: session, value: .text(Self.password), context: context)
            output(
                "(added; its key record is sealed under PolicyNV(enrollment counter = \(try device.status().enrollmentCounter ?? 0)))"
            )
        }
        print("# Touch the fingerprint reader now (20 s)")
        try step(FindGenericPassword.self, ["find-generic-password"], store, ["-s", Self.service, "-a", account, "-w"])
        { command, output in
            try command.perform(in: session, context: context) { output($0 + "    (after your finger matched)") }
        }
        print(
            "# Enrolling another finger (fprintd-enroll) would invalidate this item for good; the demo leaves your enrollment alone"
        )
        _ = try Keychain(service: Self.service, location: session.location).acting(for: .cli).remove(account)
    }

    private func describeTPM(_ selection: StoreTPM) throws {
        print("TPM:          \(selection.summary)")
        if let startup = selection.simulatorStartup {
            print("              swtpm started in \(milliseconds(startup))")
        }
        // Closed before the store connects: a TPM without resource manager takes one client at a time.
        let tpm = try TPMConnection(selection.configuration)
        defer { tpm.close() }
        let description = try tpm.describe()
        print(
            "              manufacturer \(description.manufacturer), vendor \(description.vendor), firmware \(description.firmwareVersion)"
        )
    }

    /// Prints the command line as a user would type it, runs the verb parsed from exactly those
    /// arguments against the already open store, and prints its output indented with the time taken.
    private func step<Command: ParsableCommand>(
        _: Command.Type, _ verb: [String], _ store: [String], _ arguments: [String],
        _ body: (Command, OutputLine) throws -> Void
    ) throws {
        let shown = verb + ["--keychain", "\"$STORE\""] + arguments.map(shellQuoted)
        print("$ tpm-keychain " + shown.joined(separator: " "))
        let command = try Command.parse(Array(verb.dropFirst()) + store + arguments)
        var lines: [String] = []
        var elapsed = Duration.zero
        try measured(&elapsed) { try body(command, { lines.append($0) }) }
        for line in lines { print("    " + line) }
        print("    [\(milliseconds(elapsed))]")
    }

    private func measured<T>(_ elapsed: inout Duration, _ body: () throws -> T) rethrows -> T {
        let clock = ContinuousClock()
        let start = clock.now
        defer { elapsed = clock.now - start }
        return try body()
    }

    private func shellQuoted(_ text: String) -> String {
        let plain = text.unicodeScalars.allSatisfy {
            ($0.isASCII && $0.properties.isAlphabetic) || ("0"..."9").contains($0)
                || "-_./=:@,+".unicodeScalars.contains($0)
        }
        return plain && !text.isEmpty ? text : "'" + text.replacing("'", with: "'\\''") + "'"
    }
}
