import ArgumentParser
import CommandLineSupport
import Foundation
import SecurityCompat
import TPMKeychain
import TPMKeychainFprintd
import ToolSupport

#if canImport(Glibc)
import Glibc
#endif

/// `tpm-keychain key …`: keys as keychain items (kSecClassKey), through the SecKey face, as
/// macOS's security tool works through Security.framework. A key made here is a Secure
/// Enclave-style P-256 key in the TPM; iOS code finds it by its label (kSecAttrLabel) and tag.
///
/// `tpm-keychain-keys` is a binary of its own so that the CLI people run for each lookup does not
/// link SecKey, X.509 and the Foundation they bring; `tpm-keychain key ...` hands over to it.
@main
struct KeyCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "tpm-keychain key",
        abstract: HandedOverVerb.key.abstract,
        discussion: """
            A key is named by its label (and its application tag, when labels repeat). Keys made \
            with --key-file can be written as TPM 2.0 Key Files ("TSS2 PRIVATE KEY"), which the \
            tpm2 OpenSSL provider and ssh-tpm-agent use on this machine's TPM; see docs/SECURITY.md, \
            "Key files", for what such a file gives whoever can read it.

            \(ExitStatus.helpText)
            """,
        subcommands: [
            CreateKey.self, ListKeys.self, PrintPublicKey.self, SignWithKey.self, ExportKeyFile.self,
            AddCertificate.self,
            DeleteKey.self,
        ])

    static func main() {
        CommandStart.prepare()
        main(nil)
    }
}

/// `--label` and `--tag`, naming one key.
struct KeyName: ParsableArguments {
    @Option(name: [.customShort("l"), .customLong("label")], help: "The key's label (kSecAttrLabel).")
    var label: String

    @Option(
        name: [.customShort("t"), .customLong("tag")],
        help: "The key's application tag (kSecAttrApplicationTag), as the UTF-8 bytes of the text given.")
    var tag: String?

    func validate() throws {
        guard !label.isEmpty else { throw ValidationError("The label must not be empty") }
        guard label.utf8.count <= 1024, (tag?.utf8.count ?? 0) <= 1024 else {
            throw ValidationError("The label and tag have at most 1024 bytes")
        }
    }
}

struct CreateKey: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "create",
        abstract: "Make a P-256 key in the TPM and keep it in the keychain.",
        discussion: """
            The private key is generated in the TPM and never leaves it in clear. Without \
            --key-file only the keychain can use it: its authorization value lives in its item. \
            With --key-file the key is made for TPM 2.0 Key Files (empty authorization, the parent \
            other tools derive) and its file is written to the path given (mode 0600, never over \
            an existing file); `key export` writes it again.
            """)

    @OptionGroup var store: KeychainOptions
    @OptionGroup var name: KeyName

    @Option(
        name: .customLong("key-file"),
        help: ArgumentHelp("Also write the key as a TPM 2.0 Key File.", valueName: "path"))
    var keyFile: String?

    @OptionGroup var protection: ProtectionOptions

    @Option(
        name: .customLong("fprintd-address"),
        help: ArgumentHelp("fprintd's bus, instead of the system bus.", visibility: .hidden))
    var fprintdAddress: String?

    func validate() throws {
        if keyFile != nil, protection.given {
            // A key file carries no policy: whoever holds it could use the key without the control.
            throw ValidationError("--key-file cannot be combined with --access-control or --accessible")
        }
    }

    func run() throws {
        try reportingErrors {
            try StoreSession.with(store.path) { try perform(in: $0) }
        }
    }

    func perform(in session: StoreSession, output: OutputLine = { print($0) }) throws {
        KeychainEnvironment.location = session.location
        guard try KeyLookup.find(name).isEmpty else {
            throw CommandFailure(
                ExitStatus.duplicateItem, "A key labelled \"\(name.label)\" exists already; give another label or tag")
        }
        // The file is claimed before the key is made, so that a key is never made for nowhere.
        let file = try keyFile.map { try KeyFileOutput(claiming: $0) }
        var privateAttributes: [CFString: Any] = [
            kSecAttrIsPermanent: true, kSecAttrLabel: name.label,
        ]
        if let tag = name.tag { privateAttributes[kSecAttrApplicationTag] = Data(tag.utf8) }
        if file != nil { privateAttributes[kSecAttrTPMKeyFile] = true }
        if let control = try protection.accessControl() {
            privateAttributes[kSecAttrAccessControl] = try Self.secAccessControl(control)
            // A biometryCurrentSet key is bound to the fingers enrolled now: fprintd says which.
            if control.flags.contains(.biometryCurrentSet) || control.flags.contains(.biometryAny),
                ProcessInfo.processInfo.environment["TPM_KEYCHAIN_AUTHENTICATOR"] != "none"
            {
                KeychainEnvironment.authenticator = FprintdAuthenticator(busAddress: fprintdAddress)
            }
        }
        let parameters: [CFString: Any] = [
            kSecAttrKeyType: kSecAttrKeyTypeECSECPrimeRandom, kSecAttrKeySizeInBits: 256,
            kSecAttrTokenID: kSecAttrTokenIDSecureEnclave, kSecPrivateKeyAttrs: privateAttributes,
        ]
        var error: Unmanaged<CFError>?
        guard let key = SecKeyCreateRandomKey(parameters as CFDictionary, &error) else {
            file?.abandon()
            throw KeyLookup.failure(error, "The key could not be made")
        }
        if let file {
            do {
                try file.write(try KeyLookup.keyFile(of: key))
            } catch {
                file.abandon()
                _ = SecItemDelete(KeyLookup.query(name) as CFDictionary)
                throw error
            }
        }
        output("key \"\(name.label)\" created in the TPM" + (keyFile.map { "; key file written to \($0)" } ?? ""))
    }
}

extension CreateKey {
    /// kSecAttrAccessible's constants by class; made on each use (CFString is not Sendable).
    static var protections: [Accessibility: CFString] {
        [
            .whenUnlocked: kSecAttrAccessibleWhenUnlocked, .afterFirstUnlock: kSecAttrAccessibleAfterFirstUnlock,
            .always: kSecAttrAccessibleAlways,
            .whenUnlockedThisDeviceOnly: kSecAttrAccessibleWhenUnlockedThisDeviceOnly,
            .afterFirstUnlockThisDeviceOnly: kSecAttrAccessibleAfterFirstUnlockThisDeviceOnly,
            .alwaysThisDeviceOnly: kSecAttrAccessibleAlwaysThisDeviceOnly,
            .whenPasscodeSetThisDeviceOnly: kSecAttrAccessibleWhenPasscodeSetThisDeviceOnly,
        ]
    }

    /// The SecKey face's form of `control`, made as iOS code makes one.
    static func secAccessControl(_ control: AccessControl) throws -> SecAccessControl {
        var error: Unmanaged<CFError>?
        guard let protection = protections[control.accessibility],
            let made = SecAccessControlCreateWithFlags(
                nil, protection, SecAccessControlCreateFlags(rawValue: control.flags.rawValue), &error)
        else { throw KeyLookup.failure(error, "The access control is not one a key can have") }
        return made
    }
}

struct ListKeys: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "list", abstract: "List the keychain's keys: label, tag, kind, where the private key lives.")

    @OptionGroup var store: KeychainOptions

    func run() throws {
        try reportingErrors {
            try StoreSession.withExisting(store.path) { try perform(in: $0) }
        }
    }

    func perform(in session: StoreSession, output: OutputLine = { print($0) }) throws {
        KeychainEnvironment.location = session.location
        var result: CFTypeRef?
        let status = SecItemCopyMatching(
            [
                kSecClass: kSecClassKey, kSecMatchLimit: kSecMatchLimitAll, kSecReturnAttributes: true,
            ] as CFDictionary, &result)
        guard status == errSecSuccess || status == errSecItemNotFound else {
            throw KeyLookup.failure(status, "The keys could not be listed")
        }
        for attributes in (result as? [[String: Any]]) ?? [] {
            output(Self.line(attributes))
        }
    }

    /// `"label" tag "tag": TPM P-256 private key`.
    static func line(_ attributes: [String: Any]) -> String {
        let label = (attributes[kSecAttrLabel as String] as? String) ?? ""
        var line = "\"\(label)\""
        if let tag = attributes[kSecAttrApplicationTag as String] as? Data, !tag.isEmpty {
            line +=
                " tag "
                + (String(data: tag, encoding: .utf8).map { "\"\($0)\"" }
                    ?? tag.map { String(format: "%02x", $0) }.joined())
        }
        let type = (attributes[kSecAttrKeyType as String] as? String) == (kSecAttrKeyTypeRSA as String) ? "RSA" : "EC"
        let bits = (attributes[kSecAttrKeySizeInBits as String] as? NSNumber)?.intValue ?? 0
        let inTPM = (attributes[kSecAttrTokenID as String] as? String) == (kSecAttrTokenIDSecureEnclave as String)
        let keyClass = (attributes[kSecAttrKeyClass as String] as? String) == (kSecAttrKeyClassPrivate as String)
        let kind = type == "EC" ? "P-\(bits)" : "RSA-\(bits)"
        return line + ": " + (inTPM ? "TPM " : "software ") + kind + (keyClass ? " private key" : " public key")
    }
}

struct PrintPublicKey: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "public", abstract: "Print a key's public key (PEM SubjectPublicKeyInfo or an OpenSSH line).")

    enum Format: String, ExpressibleByArgument, CaseIterable {
        case pem, openssh
    }

    @OptionGroup var store: KeychainOptions
    @OptionGroup var name: KeyName

    @Option(help: "pem (as openssl writes it) or openssh (for authorized_keys).")
    var format: Format = .pem

    func run() throws {
        try reportingErrors {
            try StoreSession.withExisting(store.path) { try perform(in: $0) }
        }
    }

    func perform(in session: StoreSession, output: OutputLine = { print($0, terminator: "") }) throws {
        KeychainEnvironment.location = session.location
        let key = try KeyLookup.one(name)
        guard let publicKey = SecKeyCopyPublicKey(key) else {
            throw CommandFailure(ExitStatus.dataError, "The key has no public key")
        }
        var error: Unmanaged<CFError>?
        guard let bytes = SecKeyCopyExternalRepresentation(publicKey, &error) else {
            throw KeyLookup.failure(error, "The public key could not be read")
        }
        let encoded = try PublicKeyEncoding(
            Array(Data(referencing: bytes)),
            isRSA: (SecKeyCopyAttributes(publicKey) as? [String: Any])?[kSecAttrKeyType as String] as? String
                == kSecAttrKeyTypeRSA as String)
        switch format {
        case .pem: output(try encoded.pem())
        case .openssh: output(try encoded.openSSH(comment: name.label) + "\n")
        }
    }
}

struct SignWithKey: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "sign",
        abstract:
            "Sign a message with a key: a DER ECDSA (or RSA PKCS#1 v1.5) signature, as openssl dgst -sign writes.",
        discussion: """
            Verify with: openssl dgst -sha256 -verify <(tpm-keychain key public -l LABEL) \
            -signature SIG MESSAGE
            """)

    enum Digest: String, ExpressibleByArgument, CaseIterable {
        case sha256, sha384, sha512
    }

    @OptionGroup var store: KeychainOptions
    @OptionGroup var name: KeyName

    @Option(help: ArgumentHelp("The message to sign; standard input when omitted.", valueName: "path"))
    var input: String?

    @Option(help: ArgumentHelp("Where the signature goes; standard output when omitted.", valueName: "path"))
    var output: String?

    @Option(help: "The message digest.")
    var digest: Digest = .sha256

    @Flag(help: "Write the signature in base64 with a newline, not in binary.")
    var base64 = false

    @OptionGroup var passcodeOptions: PasscodeOptions

    @Option(
        name: .customLong("fprintd-address"),
        help: ArgumentHelp("fprintd's bus, instead of the system bus.", visibility: .hidden))
    var fprintdAddress: String?

    func run() throws {
        try reportingErrors {
            try StoreSession.withExisting(store.path) { try perform(in: $0) }
        }
    }

    func perform(in session: StoreSession) throws {
        KeychainEnvironment.location = session.location
        let message: Data
        do {
            message =
                try input.map { try Data(contentsOf: URL(fileURLWithPath: $0)) }
                ?? FileHandle.standardInput.readDataToEndOfFile()
        } catch {
            throw CommandFailure(ExitStatus.noInput, "The message could not be read: \(error.localizedDescription)")
        }
        // A key under access control asks the person, as iOS would: the passcode (--passcode-fd,
        // TPM_KEYCHAIN_ASKPASS or the terminal) and fprintd for biometry.
        let passcode = PasscodeInput(passcodeOptions)
        KeychainEnvironment.passcode = PasscodeSource.secret { reason in
            try? passcode.read(prompt: "device passcode to \(reason): ")
        }
        if ProcessInfo.processInfo.environment["TPM_KEYCHAIN_AUTHENTICATOR"] != "none" {
            KeychainEnvironment.authenticator = FprintdAuthenticator(busAddress: fprintdAddress)
        }
        let key = try KeyLookup.one(name)
        let isRSA =
            (SecKeyCopyAttributes(key) as? [String: Any])?[kSecAttrKeyType as String] as? String
            == kSecAttrKeyTypeRSA as String
        let algorithm: SecKeyAlgorithm
        switch (digest, isRSA) {
        case (.sha256, false): algorithm = .ecdsaSignatureMessageX962SHA256
        case (.sha384, false): algorithm = .ecdsaSignatureMessageX962SHA384
        case (.sha512, false): algorithm = .ecdsaSignatureMessageX962SHA512
        case (.sha256, true): algorithm = .rsaSignatureMessagePKCS1v15SHA256
        case (.sha384, true): algorithm = .rsaSignatureMessagePKCS1v15SHA384
        case (.sha512, true): algorithm = .rsaSignatureMessagePKCS1v15SHA512
        }
        var error: Unmanaged<CFError>?
        guard let signature = SecKeyCreateSignature(key, algorithm, message as CFData, &error) else {
            throw KeyLookup.failure(error, "The message could not be signed")
        }
        var bytes = Data(referencing: signature)
        if base64 { bytes = Data((bytes.base64EncodedString() + "\n").utf8) }
        if let output {
            do {
                try bytes.write(to: URL(fileURLWithPath: output))
            } catch {
                throw CommandFailure(
                    ExitStatus.ioError, "The signature could not be written: \(error.localizedDescription)")
            }
        } else {
            FileHandle.standardOutput.write(bytes)
        }
    }
}

struct ExportKeyFile: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "export",
        abstract: "Write a key made with --key-file as a TPM 2.0 Key File (TSS2 PRIVATE KEY PEM).",
        discussion: """
            The file is usable with this machine's TPM only, by whoever can read it: openssl \
            pkey -provider tpm2 -provider default -in FILE -pubout; ssh-tpm-agent. It is written \
            with mode 0600 and never over an existing file.
            """)

    @OptionGroup var store: KeychainOptions
    @OptionGroup var name: KeyName

    @Option(help: ArgumentHelp("The key file to write.", valueName: "path"))
    var output: String

    func run() throws {
        try reportingErrors {
            try StoreSession.withExisting(store.path) { try perform(in: $0) }
        }
    }

    func perform(in session: StoreSession, report: OutputLine = { print($0) }) throws {
        KeychainEnvironment.location = session.location
        let key = try KeyLookup.one(name)
        let pem = try KeyLookup.keyFile(of: key)
        let file = try KeyFileOutput(claiming: output)
        do {
            try file.write(pem)
        } catch {
            file.abandon()
            throw error
        }
        report("key file written to \(output)")
    }
}

struct DeleteKey: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "delete",
        abstract: "Delete a key: its item, and with it the only authorization of a keychain-only TPM key.",
        discussion: """
            A key made with --key-file stays usable through key files written before: delete \
            those too.
            """)

    @OptionGroup var store: KeychainOptions
    @OptionGroup var name: KeyName

    func run() throws {
        try reportingErrors {
            try StoreSession.withExisting(store.path) { try perform(in: $0) }
        }
    }

    func perform(in session: StoreSession, output: OutputLine = { print($0) }) throws {
        KeychainEnvironment.location = session.location
        _ = try KeyLookup.one(name)
        let status = SecItemDelete(KeyLookup.query(name) as CFDictionary)
        guard status == errSecSuccess else { throw KeyLookup.failure(status, "The key could not be deleted") }
        output("key has been deleted.")
    }
}
