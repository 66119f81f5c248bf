import ArgumentParser
import CommandLineSupport
import Foundation
import SecurityCompat
import TPMKeychain
import ToolSupport

/// `key add-certificate`: a key's X.509 certificate kept beside it, which makes the pair an
/// identity: SecItem finds it as kSecClassIdentity, and the PKCS#11 module offers it as the
/// key's CKO_CERTIFICATE (for TLS client authentication by `pkcs11:` URI).
struct AddCertificate: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "add-certificate",
        abstract: "Keep a key's X.509 certificate in the keychain, making the two an identity.",
        discussion: """
            The certificate must be for the key: its public key must be the key's, or nothing \
            is stored. It gets the key's label, so that `pkcs11:object=LABEL;type=cert` and \
            `type=private` name the pair.
            """)

    @OptionGroup var store: KeychainOptions
    @OptionGroup var name: KeyName

    @Option(help: ArgumentHelp("The certificate, PEM or DER.", valueName: "path"))
    var certificate: String

    /// Certificates are a few KiB; a larger file is not one.
    static let largestCertificate = 64 * 1024

    func run() throws {
        try reportingErrors {
            try StoreSession.withExisting(store.path) { try perform(in: $0) }
        }
    }

    func perform(in session: StoreSession, output: OutputLine = { print($0) }) throws {
        KeychainEnvironment.location = session.location
        let parsed = try Self.read(certificate)
        let key = try KeyLookup.one(name)
        guard let certified = SecCertificateCopyKey(parsed).flatMap(Self.publicBytes),
            certified == SecKeyCopyPublicKey(key).flatMap(Self.publicBytes)
        else {
            throw CommandFailure(
                ExitStatus.dataError,
                "The certificate is not for the key \"\(name.label)\": its public key is another one")
        }
        let status = SecItemAdd(
            [kSecClass: kSecClassCertificate, kSecValueRef: parsed, kSecAttrLabel: name.label] as CFDictionary, nil)
        guard status == errSecSuccess else {
            throw KeyLookup.failure(status, "The certificate could not be stored")
        }
        let subject = SecCertificateCopySubjectSummary(parsed).map { $0 as String } ?? "a certificate"
        output("certificate \"\(subject)\" stored for key \"\(name.label)\"")
    }

    /// The certificate in `path`: DER, or the first CERTIFICATE block of a PEM file.
    static func read(_ path: String) throws -> SecCertificate {
        let contents: Data
        do {
            contents = try Data(contentsOf: URL(fileURLWithPath: path))
        } catch {
            throw CommandFailure(ExitStatus.noInput, "\(path) could not be read: \(error.localizedDescription)")
        }
        guard contents.count <= largestCertificate else {
            throw CommandFailure(ExitStatus.dataError, "\(path) is larger than a certificate can be (64 KiB)")
        }
        var der = contents
        if let text = String(data: contents, encoding: .utf8),
            let begin = text.range(of: "-----BEGIN CERTIFICATE-----")
        {
            guard let end = text.range(of: "-----END CERTIFICATE-----", range: begin.upperBound..<text.endIndex),
                let decoded = Data(
                    base64Encoded: String(text[begin.upperBound..<end.lowerBound]),
                    options: .ignoreUnknownCharacters)
            else {
                throw CommandFailure(ExitStatus.dataError, "\(path) holds a PEM certificate that does not decode")
            }
            der = decoded
        }
        guard let certificate = SecCertificateCreateWithData(nil, der as CFData) else {
            throw CommandFailure(ExitStatus.dataError, "\(path) is not an X.509 certificate (PEM or DER)")
        }
        return certificate
    }

    private static func publicBytes(of key: SecKey) -> Data? {
        SecKeyCopyExternalRepresentation(key, nil).map { Data(referencing: $0) }
    }
}
