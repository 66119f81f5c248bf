// swift-tools-version: 6.0
// TPMKeychain 0.3.0: Apple's Keychain model on Linux, rooted in the machine's TPM 2.0.
// Linux only (x86_64, arm64): Apple's platforms have their own Keychain, and tpm2-tss is a Linux
// stack. No `platforms:` entry, since that only sets minimum Apple OS versions.
import PackageDescription

let strictness: [SwiftSetting] = [
    .enableUpcomingFeature("InternalImportsByDefault"),
    .enableUpcomingFeature("ExistentialAny"),
]

let package = Package(
    name: "TPMKeychain",
    products: [
        .library(name: "TPMKeychain", targets: ["TPMKeychain"]),
        .library(name: "TPM", targets: ["TPM"]),
        .library(name: "TPMKeychainTesting", targets: ["TPMKeychainTesting"]),
        .library(name: "SecurityCompat", targets: ["SecurityCompat"]),
        .library(name: "LocalAuthenticationCompat", targets: ["LocalAuthenticationCompat"]),
        .library(name: "SecureEnclaveCompat", targets: ["SecureEnclaveCompat"]),
        .library(name: "KeychainStorageCompat", targets: ["KeychainStorageCompat"]),
        .library(name: "TPMKeychainFprintd", targets: ["TPMKeychainFprintd"]),
        .executable(name: "tpm-keychain", targets: ["tpm-keychain"]),
        .executable(name: "tpm-keychain-keys", targets: ["tpm-keychain-keys"]),
        .executable(name: "git-credential-tpm-keychain", targets: ["git-credential-tpm-keychain"]),
        .executable(name: "tpm-keychain-enrollment", targets: ["tpm-keychain-enrollment"]),
        .executable(name: "tpm-keychain-secret-service", targets: ["tpm-keychain-secret-service"]),
        .executable(name: "tpm-keychain-ssh-agent", targets: ["tpm-keychain-ssh-agent"]),
        .executable(name: "tpm-keychain-passkeys", targets: ["tpm-keychain-passkeys"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-crypto.git", from: "4.5.2"),
        .package(url: "https://github.com/apple/swift-argument-parser.git", from: "1.5.0"),
        .package(url: "https://github.com/apple/swift-log.git", from: "1.16.0"),
        .package(url: "https://github.com/apple/swift-certificates.git", from: "1.21.0"),
        .package(url: "https://github.com/apple/swift-asn1.git", from: "1.7.0"),
        .package(url: "https://github.com/swiftlang/swift-docc-plugin.git", from: "1.5.0"),
    ],
    targets: [
        // Layer 0: the tpm2-tss C libraries (ESAPI, TCTI loader, marshalling, RC decoding).
        .systemLibrary(
            name: "CTSS2",
            path: "Sources/CTSS2",
            pkgConfig: "tss2-esys",
            providers: [.apt(["libtss2-dev"])]
        ),
        // One private OpenSSL context for ESAPI's hashes and HMACs instead of a new one for each
        // (tpm2-tss makes 18 in one CLI lookup). C, because it repoints libtss2-esys's own import
        // slots for two libcrypto functions; see its header. Only the TPM target uses it.
        .target(name: "CESAPICryptoContext", linkerSettings: [.linkedLibrary("dl"), .linkedLibrary("crypto")]),
        // The words every layer speaks, defined once: KeychainError, Accessibility, AccessControl
        // and ItemAttributes. Public through TPMKeychain, which re-exports it.
        .target(name: "KeychainVocabulary", dependencies: ["WireFormat"], swiftSettings: strictness),
        // Byte coding, a leaf with its own error: the big-endian codec, the TPM's canonical
        // encoding that every format uses (WireReader/WireWriter), and the one hex printer and parser.
        .target(name: "WireFormat", swiftSettings: strictness),
        // libc calls with EINTR retry and typed errno, shared by every target that makes syscalls.
        .target(name: "SystemCalls", dependencies: ["WireFormat", "CSystemCalls"], swiftSettings: strictness),
        // C: the calls Swift cannot make (keyctl through syscall(2), getrandom, explicit_bzero,
        // madvise), for SystemCalls and Secrets only.
        .target(name: "CSystemCalls", path: "Sources/CSystemCalls"),
        // Secrets in memory and randomness, below the TPM layer so that a face holds a secret
        // without importing TPM: SecretBytes, SecretMemory, SystemRandom. Re-exported by TPM and
        // TPMKeychain.
        .target(name: "Secrets", dependencies: ["SystemCalls", "CSystemCalls"], swiftSettings: strictness),
        // Layer 1: Swift over ESAPI. The only target that imports CTSS2.
        .target(
            name: "TPM",
            dependencies: [
                "CTSS2", "CESAPICryptoContext", "SystemCalls", "Secrets", "WireFormat",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "SwiftASN1", package: "swift-asn1"),
            ],
            swiftSettings: strictness
        ),
        // Layer 2: the store engine. On-disk format, item sealing, atomic files, locking.
        .target(
            name: "KeychainStore",
            dependencies: [
                "KeychainVocabulary", "TPM", "SystemCalls", "WireFormat",
                .product(name: "Crypto", package: "swift-crypto"),
            ],
            swiftSettings: strictness
        ),
        // Layer 3: the service, the one door to the engine and the only target that imports it
        // (the fuzz harness aside). Items, stores, the device, opening key records, archives:
        // every operation decided at its one decision point (ItemService.decide).
        .target(
            name: "KeychainService",
            dependencies: [
                "KeychainVocabulary", "KeychainStore", "TPM", "TPMSimulator", "SystemCalls", "Secrets", "WireFormat",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "CryptoExtras", package: "swift-crypto"),
            ],
            swiftSettings: strictness
        ),
        // Moving items: export archives and their import, and the readers of other keyrings'
        // exports (pass, password managers' CSV and JSON), over the service's items.
        .target(
            name: "KeychainTransfer",
            dependencies: [
                "KeychainService", "KeychainVocabulary", "TPM", "SystemCalls", "WireFormat",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "CryptoExtras", package: "swift-crypto"),
            ],
            swiftSettings: strictness
        ),
        // Layer 4: the public Swift API over the service (Keychain, AuthenticationContext, the
        // public entry points that take a context). Re-exports the service's public vocabulary.
        .target(
            name: "TPMKeychain",
            dependencies: [
                "KeychainService", "KeychainTransfer", "KeychainVocabulary", "TPM", "SystemCalls", "Secrets",
                "WireFormat",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Crypto", package: "swift-crypto"),
            ],
            swiftSettings: strictness
        ),
        // iOS keychain code on Linux with only its imports changed: SecItem* over the engine, and
        // the Core Foundation surface Linux lacks. Never named "Security" (that would flip
        // canImport(Security) for every package in a build).
        .target(
            name: "SecurityCompat",
            dependencies: [
                "TPMKeychain", "KeychainVocabulary", "SystemCalls", "Secrets", "WireFormat",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "CryptoExtras", package: "swift-crypto"),
                .product(name: "X509", package: "swift-certificates"),
                .product(name: "SwiftASN1", package: "swift-asn1"),
            ],
            swiftSettings: strictness),
        // CryptoKit's SecureEnclave on the TPM, with swift-crypto's types at the edges, over SecurityCompat's SecKey.
        .target(
            name: "SecureEnclaveCompat",
            dependencies: [
                "SecurityCompat", "LocalAuthenticationCompat", "TPMKeychain", "TPM",
                .product(name: "Crypto", package: "swift-crypto"),
            ],
            swiftSettings: strictness),
        // LAContext, LAPolicy, LABiometryType and LAError over TPMKeychain's AuthenticationContext.
        .target(
            name: "LocalAuthenticationCompat", dependencies: ["TPMKeychain", "SystemCalls"], swiftSettings: strictness),
        // SAP's KeychainStorage API (named stores, password ciphers) over TPMKeychain.
        .target(
            name: "KeychainStorageCompat",
            dependencies: [
                "TPMKeychain", "KeychainVocabulary", "SystemCalls", .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "CryptoExtras", package: "swift-crypto"),
            ],
            swiftSettings: strictness),
        // swtpm as a child process: used by the CLI's embedded default and by tests.
        .target(name: "TPMSimulator", dependencies: ["TPM", "SystemCalls", "WireFormat"], swiftSettings: strictness),
        // What users import in their own tests: the simulator plus recording helpers.
        .target(
            name: "TPMKeychainTesting", dependencies: ["TPMKeychain", "TPMSimulator", "SystemCalls", "WireFormat"],
            swiftSettings: strictness),
        // libsystemd's sd-bus (headers from libsystemd-dev), loaded with dlopen when a bus is first
        // used rather than linked, so that programs which never open a bus do not load it at start.
        // Only the DBus target imports it.
        .target(name: "CSystemdBus", path: "Sources/CSystemdBus", linkerSettings: [.linkedLibrary("dl")]),
        // D-Bus over sd-bus, both sides: calls, signals and their senders for the fprintd and logind
        // clients; names, served object trees, values of any type and callers' credentials for the
        // Secret Service daemon. The only target that imports CSystemdBus.
        .target(name: "DBus", dependencies: ["CSystemdBus", "SystemCalls"], swiftSettings: strictness),
        // Modular exponentiation through OpenSSL's constant-time BIGNUM code, for the Secret
        // Service's Diffie-Hellman sessions (swift-crypto has no finite-field DH).
        .target(name: "CModularExponentiation", linkerSettings: [.linkedLibrary("crypto")]),
        // The Secret Service provider (org.freedesktop.secrets): collections are stores, items are
        // generic passwords with their attributes authenticated, served over the DBus target.
        .target(
            name: "SecretService",
            dependencies: [
                "TPMKeychain", "KeychainVocabulary", "ToolSupport", "DBus", "SystemCalls", "WireFormat",
                "CModularExponentiation", "Secrets",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "CryptoExtras", package: "swift-crypto"),
            ],
            swiftSettings: strictness
        ),
        // The ssh agent (OpenSSH's agent protocol on a Unix socket): the keychain's TPM keys
        // tagged `ssh`, listed and used through the service for each connection's caller.
        .target(
            name: "SSHAgent",
            dependencies: [
                "TPMKeychain", "KeychainVocabulary", "SystemCalls", "WireFormat",
                .product(name: "Crypto", package: "swift-crypto"),
            ],
            swiftSettings: strictness
        ),
        // Asking the person through a command they configure (systemd-ask-password, a dialog):
        // the passcode and yes/no questions of the daemons (Secret Service, ssh agent, passkeys).
        .target(
            name: "PersonPrompts", dependencies: ["TPMKeychain", "SystemCalls", "WireFormat"], swiftSettings: strictness
        ),
        // A fingerprint authenticator over fprintd (system D-Bus), and the session lock from logind.
        .target(
            name: "TPMKeychainFprintd",
            dependencies: [
                "TPMKeychain", "DBus", "SystemCalls", "WireFormat", .product(name: "Crypto", package: "swift-crypto"),
            ],
            swiftSettings: strictness
        ),
        // What the command-line tools share: the store session (store directory plus the TPM
        // chosen for it), the process guard (no core dumps, crash and interruption handling), exit
        // statuses, and password items of both classes on the store engine (internet passwords and
        // attributes the Keychain API does not offer).
        .target(
            name: "ToolSupport", dependencies: ["TPMKeychain", "KeychainVocabulary", "TPM"], swiftSettings: strictness),
        // What tpm-keychain's binaries share: --keychain, error reporting, the hand-over table.
        .target(
            name: "CommandLineSupport",
            dependencies: [
                "TPMKeychain", "TPM", "TPMSimulator", "SystemCalls", "ToolSupport", "WireFormat",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ],
            swiftSettings: strictness
        ),
        // The CLI people run for each lookup: FoundationEssentials only, no SecKey or daemon.
        .executableTarget(
            name: "tpm-keychain",
            dependencies: [
                "TPMKeychain", "KeychainVocabulary", "TPM", "TPMSimulator", "SystemCalls", "WireFormat",
                "TPMKeychainFprintd", "ToolSupport", "KeychainTransfer", "CommandLineSupport",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Crypto", package: "swift-crypto"),
            ],
            swiftSettings: strictness
        ),
        // The key verbs (`tpm-keychain key` hands over to it): a binary of its own, so the lookup
        // CLI links neither SecKey and X.509 nor the Foundation they bring.
        .executableTarget(
            name: "tpm-keychain-keys",
            dependencies: [
                "SecurityCompat", "TPMKeychain", "ToolSupport", "CommandLineSupport", "TPMKeychainFprintd",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "CryptoExtras", package: "swift-crypto"),
            ],
            swiftSettings: strictness
        ),
        // The Secret Service daemon and its import (`tpm-keychain secret-service` hands over to it):
        // a binary of its own, so the lookup CLI links neither the daemon nor D-Bus for it.
        .executableTarget(
            name: "tpm-keychain-secret-service",
            dependencies: [
                "SecretService", "TPMKeychain", "TPMKeychainFprintd", "ToolSupport", "SystemCalls",
                "CommandLineSupport", "PersonPrompts",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ],
            swiftSettings: strictness
        ),
        // The ssh agent's binary: `tpm-keychain-ssh-agent [-a SOCKET] [--keychain DIR]`.
        .executableTarget(
            name: "tpm-keychain-ssh-agent",
            dependencies: [
                "SSHAgent", "TPMKeychain", "ToolSupport", "SystemCalls", "CommandLineSupport", "PersonPrompts",
                "TPMKeychainFprintd",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ],
            swiftSettings: strictness
        ),
        // The passkey authenticator (CTAP 2.1 over CTAPHID reports): credentials are the
        // keychain's TPM key items, the PIN is checked by the TPM, all through the service.
        .target(
            name: "Passkeys",
            dependencies: [
                "TPMKeychain", "SystemCalls", "WireFormat", "Secrets",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "CryptoExtras", package: "swift-crypto"),
            ],
            swiftSettings: strictness
        ),
        // Its binary: `tpm-keychain-passkeys [--socket PATH] [--presence-command CMD]`.
        .executableTarget(
            name: "tpm-keychain-passkeys",
            dependencies: [
                "Passkeys", "TPMKeychain", "ToolSupport", "SystemCalls", "CommandLineSupport", "PersonPrompts",
                "TPMKeychainFprintd", .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ],
            swiftSettings: strictness
        ),
        // The enrollment helper: run by root, tells each user a keyed hash of their own
        // fingerprint files (fprintd's store), so re-enrolling a finger is seen, and binds stores to users.
        .executableTarget(
            name: "tpm-keychain-enrollment",
            dependencies: ["SystemCalls", .product(name: "Crypto", package: "swift-crypto")],
            swiftSettings: strictness
        ),
        // git's credential helper (get, store, erase) over the store: internet-password items, no ArgumentParser.
        .executableTarget(
            name: "git-credential-tpm-keychain",
            dependencies: ["ToolSupport", "TPMKeychain", "KeychainVocabulary", "TPM", "TPMSimulator", "SystemCalls"],
            swiftSettings: strictness
        ),
        // Outside the product's layers (Sources/): the benchmarks, their C floor, and the stress
        // writer the crash tests run, all under Tests/.
        // The floor the benchmarks compare against: the same round trips written directly in C.
        .executableTarget(
            name: "ESAPIFloor",
            dependencies: ["CESAPICryptoContext"],
            path: "Tests/Benchmarks/ESAPIFloor",
            linkerSettings: [.linkedLibrary("tss2-esys"), .linkedLibrary("tss2-tctildr")]
        ),
        // Writes to a store from its own process; the crash and multi-process tests kill it mid-write.
        .executableTarget(
            name: "tpm-keychain-stress", dependencies: ["TPMKeychain", "KeychainStorageCompat", "SystemCalls"],
            path: "Tests/Support/tpm-keychain-stress",
            swiftSettings: strictness),
        // One operation of one in-process face (Keychain API, SecItem, KeychainStorage) in a
        // process of its own: EveryFaceDecisionTests runs it as another user and while locked.
        .executableTarget(
            name: "tpm-keychain-face-probe", dependencies: ["TPMKeychain", "SecurityCompat", "KeychainStorageCompat"],
            path: "Tests/Support/tpm-keychain-face-probe",
            swiftSettings: strictness),
        // The crash tests' handle on tpm-keychain-stress: its process and where to kill it.
        .target(name: "StressProcess", path: "Tests/Support/StressProcess", swiftSettings: strictness),
        // The turns test targets take at SecItem's process-wide configuration.
        .target(
            name: "KeychainEnvironmentTurns", path: "Tests/Support/KeychainEnvironmentTurns", swiftSettings: strictness),
        // Benchmarks are an executable, not timed tests: `swift run -c release TPMBenchmarks`.
        .executableTarget(
            name: "TPMBenchmarks",
            dependencies: [
                "TPM", "TPMKeychainTesting", "TPMKeychain", "KeychainStore", "SystemCalls", "WireFormat",
                "SecurityCompat", "KeychainStorageCompat", "SSHAgent", "Passkeys",
                .product(name: "Crypto", package: "swift-crypto"),
            ],
            path: "Tests/Benchmarks/TPMBenchmarks",
            swiftSettings: strictness
        ),
        // libFuzzer harness over every parser of untrusted bytes (Scripts/fuzz.sh builds it with
        // -sanitize=fuzzer); built normally, it replays corpus files (Fixtures/fuzz/).
        .target(name: "CFuzzing", path: "Tests/Fuzz/CFuzzing"),
        .executableTarget(
            name: "tpm-keychain-fuzz",
            dependencies: ["CFuzzing", "KeychainStore", "TPMKeychain", "ToolSupport", "KeychainTransfer", "SSHAgent"],
            path: "Tests/Fuzz/tpm-keychain-fuzz", swiftSettings: strictness),
        .testTarget(
            name: "TPMTests",
            // CTSS2 only for ESAPICryptoCallbacksTests, which calls the C callbacks as ESAPI would.
            dependencies: [
                "TPM", "TPMKeychainTesting", "CTSS2", .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"), "SystemCalls", "WireFormat",
                .product(name: "SwiftASN1", package: "swift-asn1"),
            ],
            swiftSettings: strictness
        ),
        // The store engine alone: formats against their vectors, key records, queries, and every
        // parser's fuzz corpus replayed through the harness.
        .testTarget(
            name: "KeychainStoreTests",
            dependencies: [
                "KeychainStore", "KeychainVocabulary", "TPM", "TPMKeychainTesting", "tpm-keychain-fuzz", "SystemCalls",
                .product(name: "Crypto", package: "swift-crypto"),
            ],
            swiftSettings: strictness
        ),
        .testTarget(
            name: "TPMKeychainTests",
            dependencies: [
                "TPMKeychain", "KeychainVocabulary", "KeychainStore", "TPM", "TPMKeychainTesting",
                "tpm-keychain-stress", "StressProcess", "tpm-keychain-face-probe",
                .product(name: "Crypto", package: "swift-crypto"), "SystemCalls",
            ],
            swiftSettings: strictness
        ),
        // Runs the built tpm-keychain binary as a user would.
        .testTarget(
            name: "TPMKeychainCLITests",
            // KeychainStore only to set up stores a CLI cannot make (one recorded as made on a TPM device);
            // the git helper and the face probe for the table of every face's refusals;
            // ToolSupport and KeychainVocabulary for the readers of other keyrings' exports;
            // the ssh agent's and the authenticator's binaries for the libraries each links.
            dependencies: [
                "TPMKeychain", "TPM", "TPMKeychainTesting", "tpm-keychain", "tpm-keychain-secret-service",
                "tpm-keychain-keys", "tpm-keychain-ssh-agent", "tpm-keychain-passkeys",
                "git-credential-tpm-keychain", "tpm-keychain-face-probe", "KeychainStore", "ToolSupport",
                "KeychainTransfer", "SystemCalls",
                "KeychainVocabulary", .product(name: "Crypto", package: "swift-crypto"),
            ],
            swiftSettings: strictness
        ),
        // Real `git credential fill/approve/reject` (and a clone over HTTP with basic auth) through
        // the built git-credential-tpm-keychain, on a private swtpm.
        .testTarget(
            name: "GitCredentialTests",
            dependencies: [
                "git-credential-tpm-keychain", "SecurityCompat", "TPMKeychain", "TPMKeychainTesting",
                "KeychainEnvironmentTurns",
            ],
            swiftSettings: strictness
        ),
        // Every Swift snippet of README.md and docs/RECIPES.md, compiled (and the test recipes run).
        .testTarget(
            name: "DocumentationTests",
            dependencies: ["TPMKeychain", "TPM", "TPMKeychainTesting", "TPMKeychainFprintd", "KeychainStorageCompat"],
            swiftSettings: strictness
        ),
        // FprintdAuthenticator against a python-dbusmock fprintd on a private dbus-daemon (Fixtures/fprintd/),
        // LogindSessionLock against a python-dbusmock logind (Fixtures/logind/), with a keychain on swtpm;
        // the CLI's follow-screen-lock against the same mock.
        .testTarget(
            name: "FprintdTests",
            dependencies: [
                "TPMKeychainFprintd", "TPMKeychain", "TPMKeychainTesting", "SystemCalls", "tpm-keychain-enrollment",
                "tpm-keychain", "tpm-keychain-keys", "tpm-keychain-ssh-agent", "tpm-keychain-passkeys",
                "LocalAuthenticationCompat", "TPM", .product(name: "Crypto", package: "swift-crypto"),
            ],
            swiftSettings: strictness
        ),
        // iOS keychain code in the seeds' style and Apple's documented key code, compiled against
        // SecurityCompat, LocalAuthenticationCompat and SecureEnclaveCompat and run on swtpm.
        .testTarget(
            name: "SecurityCompatTests",
            dependencies: [
                "SecurityCompat", "LocalAuthenticationCompat", "SecureEnclaveCompat", "TPMKeychain", "TPM",
                "TPMKeychainTesting", "SystemCalls", "WireFormat", .product(name: "Crypto", package: "swift-crypto"),
                "KeychainEnvironmentTurns", .product(name: "X509", package: "swift-certificates"),
                .product(name: "SwiftASN1", package: "swift-asn1"),
            ],
            swiftSettings: strictness
        ),
        // SAP's documented KeychainStorage usage, and a cipher change killed 100 times.
        .testTarget(
            name: "KeychainStorageCompatTests",
            dependencies: [
                "KeychainStorageCompat", "TPMKeychain", "TPMKeychainTesting", "tpm-keychain-stress", "StressProcess",
                "SystemCalls",
            ],
            swiftSettings: strictness
        ),
        // The Secret Service daemon with real clients (secret-tool, python3-secretstorage,
        // python3-keyring) on a private dbus-daemon, its stores on a private swtpm.
        .testTarget(
            name: "SecretServiceTests",
            dependencies: [
                "tpm-keychain", "tpm-keychain-secret-service", "tpm-keychain-keys", "TPMKeychainTesting", "SystemCalls",
            ],
            swiftSettings: strictness
        ),
        // The daemon's parts on their own: paths, display text, the Items schedule, DH sessions,
        // the objects' argument parsing and session ownership (DBus for the values they take).
        .testTarget(
            name: "SecretServiceUnitTests",
            dependencies: [
                "SecretService", "KeychainVocabulary", "DBus", "WireFormat", "Secrets",
                .product(name: "Crypto", package: "swift-crypto"),
            ],
            swiftSettings: strictness
        ),
        // The ssh agent: its protocol on its own, and the agent with OpenSSH's own clients
        // (ssh-add, ssh-keygen -Y) over keys made in a private swtpm; other users refused.
        .testTarget(
            name: "SSHAgentTests",
            dependencies: [
                "SSHAgent", "TPMKeychain", "KeychainService", "KeychainVocabulary", "tpm-keychain-ssh-agent",
                "tpm-keychain", "tpm-keychain-keys", "TPMKeychainTesting", "SystemCalls",
                .product(name: "Crypto", package: "swift-crypto"),
            ],
            swiftSettings: strictness
        ),
        // The passkey authenticator: its CBOR and CTAPHID on their own, and the binary over a
        // private swtpm with python-fido2 as the client and py_webauthn as the relying party.
        .testTarget(
            name: "PasskeysTests",
            dependencies: [
                "Passkeys", "TPMKeychain", "KeychainStore", "tpm-keychain-passkeys", "tpm-keychain",
                "tpm-keychain-keys", "TPMKeychainTesting", "SystemCalls",
            ],
            swiftSettings: strictness
        ),
        .testTarget(
            name: "TPMSimulatorTests",
            dependencies: ["TPMSimulator", "TPMKeychainTesting", "SystemCalls"],
            swiftSettings: strictness
        ),
    ],
    swiftLanguageModes: [.v6]
)
