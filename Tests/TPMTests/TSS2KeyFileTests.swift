import Crypto
import Foundation
import SwiftASN1
import TPMKeychainTesting
import Testing

@testable import TPM

/// TPM 2.0 Key Files ("TSS2 PRIVATE KEY"): written for keys under the key-file parent, loaded by
/// Debian's tpm2 OpenSSL provider on the same TPM, read back, and refused when malformed.
@Suite struct TSS2KeyFileTests {
    static let message = Data("signed inside the TPM, through openssl".utf8)

    @Test(
        "A key made for key files is written as a TSS2 PRIVATE KEY that the tpm2 OpenSSL provider loads: the same public key, a signature made in the TPM that swift-crypto verifies, and the file reads back to the same key"
    )
    func openSSLProviderUsesTheFile() throws {
        try withSimulator { simulator, configuration in
            let key = try withConnection(configuration) { try $0.createKey(.signing, parent: .keyFilePrimary) }
            #expect(key.isWritableAsKeyFile)
            let pem = try key.tss2KeyFile(emptyAuth: true)
            #expect(pem.hasPrefix("-----BEGIN TSS2 PRIVATE KEY-----\n"))

            let parentName = try withConnection(configuration) { try $0.keyFileParentName() }
            #expect(parentName == key.storageKeyName)
            let read = try TPMKey.parsingTSS2KeyFile(pem, parentName: parentName)
            #expect(read.key == key && read.emptyAuth)

            let directory = try Self.scratchDirectory()
            defer { try? FileManager.default.removeItem(atPath: directory) }
            try Data(pem.utf8).write(to: URL(fileURLWithPath: directory + "/key.pem"))
            let environment = ["TPM2OPENSSL_TCTI": simulator.tcti]
            let publicPEM = try SystemTool.output(
                "/usr/bin/openssl",
                ["pkey", "-provider", "tpm2", "-provider", "default", "-in", directory + "/key.pem", "-pubout"],
                environment: environment)
            let opensslKey = try P256.Signing.PublicKey(pemRepresentation: String(decoding: publicPEM, as: UTF8.self))
            #expect(Array(opensslKey.x963Representation) == key.publicKey)

            // propquery makes openssl sign with the provider's key, in the TPM.
            let signature = try SystemTool.output(
                "/usr/bin/openssl",
                [
                    "dgst", "-sha256", "-provider", "tpm2", "-provider", "default", "-propquery", "?provider=tpm2",
                    "-sign", directory + "/key.pem",
                ], environment: environment, input: Self.message)
            let ecdsa = try P256.Signing.ECDSASignature(derRepresentation: signature)
            #expect(opensslKey.isValidSignature(ecdsa, for: Self.message))
            #expect(!opensslKey.isValidSignature(ecdsa, for: Data("another message".utf8)))

            // And this library uses the key it read from the file.
            let raw = try withConnection(configuration) {
                try $0.sign(Array(SHA256.hash(data: Self.message)), with: read.key)
            }
            #expect(
                opensslKey.isValidSignature(try P256.Signing.ECDSASignature(rawRepresentation: raw), for: Self.message))
        }
    }

    @Test(
        "Only a key under the key-file parent whose policy is its authorization value alone is written: a storage-key key and a key with a larger policy are refused"
    )
    func onlyKeyFileKeysAreWritten() throws {
        try withSimulator { _, configuration in
            let storageKeyKey = try withConnection(configuration) { try $0.createKey(.signing) }
            #expect(!storageKeyKey.isWritableAsKeyFile)
            expectTPMError(.invalidArgument) { _ = try storageKeyKey.tss2KeyFile(emptyAuth: true) }

            let policy = Policy([.authValue, .commandCode(CommandCode.sign)])
            let policyKey = try withConnection(configuration) {
                try $0.createKey(.signing, policy: policy, parent: .keyFilePrimary)
            }
            #expect(!policyKey.isWritableAsKeyFile)
            expectTPMError(.invalidArgument) { _ = try policyKey.tss2KeyFile(emptyAuth: true) }
        }
    }

    @Test(
        "A key under the key-file parent is stored as TKKY version 2 and comes back under that parent; a storage-key key stays version 1; an unknown parent template is refused"
    )
    func blobVersions() throws {
        try withSimulator { _, configuration in
            let (fileKey, storageKeyKey) = try withConnection(configuration) {
                (try $0.createKey(.signingAndKeyAgreement, parent: .keyFilePrimary), try $0.createKey(.signing))
            }
            let fileBytes = fileKey.serialized()
            #expect(Array(fileBytes[4..<6]) == [0, 2] && fileBytes[7] == 1)
            let reread = try TPMKey(serialized: fileBytes)
            #expect(reread == fileKey && reread.storageKeyAlgorithm == .eccP256KeyFile)
            #expect(Array(storageKeyKey.serialized()[4..<6]) == [0, 1])
            #expect(try TPMKey(serialized: storageKeyKey.serialized()).storageKeyAlgorithm == .eccP256)

            var unknownTemplate = fileBytes
            unknownTemplate[7] = 2
            expectTPMError(.malformedData) { _ = try TPMKey(serialized: unknownTemplate) }

            // The two parents are different keys: each key is usable only under its own.
            let digest = Array(SHA256.hash(data: Self.message))
            _ = try withConnection(configuration) { try $0.sign(digest, with: reread) }
            let misplaced = try TPMKey(
                usage: fileKey.usage, publicArea: fileKey.publicArea, privateArea: fileKey.privateArea,
                storageKeyAlgorithm: .eccP256, storageKeyName: storageKeyKey.storageKeyName)
            #expect(throws: TPMError.self) {
                _ = try withConnection(configuration) { try $0.sign(digest, with: misplaced) }
            }
        }
    }

    @Test(
        "Malformed key files are refused with malformedData: not PEM, another PEM type, another OID, another parent, extra fields, a public area this library does not make"
    )
    func malformedFilesAreRefused() throws {
        try withSimulator { _, configuration in
            let key = try withConnection(configuration) { try $0.createKey(.signing, parent: .keyFilePrimary) }
            let parentName = key.storageKeyName
            let good = try key.tss2KeyFile(emptyAuth: false)
            #expect(try TPMKey.parsingTSS2KeyFile(good, parentName: parentName).emptyAuth == false)

            func file(
                label: String = "TSS2 PRIVATE KEY", oid: ASN1ObjectIdentifier = [2, 23, 133, 10, 1, 3],
                parent: Int = 0x4000_0001, publicArea: [UInt8]? = nil, extra: Bool = false
            ) throws -> String {
                var serializer = DER.Serializer()
                try serializer.appendConstructedNode(identifier: .sequence) { coder in
                    try coder.serialize(oid)
                    try coder.serialize(parent)
                    try coder.serialize(ASN1OctetString(contentBytes: (publicArea ?? key.publicArea)[...]))
                    try coder.serialize(ASN1OctetString(contentBytes: key.privateArea[...]))
                    if extra { try coder.serialize(ASN1OctetString(contentBytes: [1, 2, 3])) }
                }
                return PEMDocument(type: label, derBytes: serializer.serializedBytes).pemString
            }
            // The helper itself makes a file that reads, so each refusal below is for its one change.
            #expect(try TPMKey.parsingTSS2KeyFile(try file(), parentName: parentName).key == key)

            var restricted = key.publicArea
            restricted[7] |= 0x01 // TPMA_OBJECT_RESTRICTED is bit 16
            let malformed = [
                "not a key file",
                String(good.dropLast(40)),
                try file(label: "PRIVATE KEY"),
                try file(oid: [2, 23, 133, 10, 1, 4]),
                try file(parent: 0x8100_0001),
                try file(extra: true),
                try file(publicArea: Array(key.publicArea.dropLast(3))),
                try file(publicArea: restricted),
            ]
            for text in malformed {
                expectTPMError(.malformedData) { _ = try TPMKey.parsingTSS2KeyFile(text, parentName: parentName) }
            }
        }
    }

    static func scratchDirectory() throws -> String {
        let path = NSTemporaryDirectory() + "tpm-keychain-tss2-" + UUID().uuidString
        try FileManager.default.createDirectory(
            atPath: path, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        return path
    }
}
