import Crypto
import Foundation
import TPMKeychainTesting
import Testing

@testable import TPM

/// P-256 keys made in the TPM: signatures that swift-crypto verifies, ECDH secrets that match
/// swift-crypto's, policies and PINs enforced by the TPM, blobs bound to their TPM.
@Suite struct TPMKeyTests {
    static let message = Data("a message the TPM signs".utf8)

    @Test(
        "A signing key made in the TPM signs SHA-256, -384 and -512 digests with ECDSA; swift-crypto verifies each with the exported public key, and not for another message"
    )
    func signaturesVerify() throws {
        try withSimulator { _, configuration in
            let key = try withConnection(configuration) { try $0.createKey(.signing) }
            #expect(key.usage == .signing && key.usableWithAuthValue && !key.isDictionaryAttackProtected)
            let publicKey = try P256.Signing.PublicKey(x963Representation: key.publicKey)
            let digests: [[UInt8]] = [
                Array(SHA256.hash(data: Self.message)), Array(SHA384.hash(data: Self.message)),
                Array(SHA512.hash(data: Self.message)),
            ]
            for digest in digests {
                let raw = try withConnection(configuration) { try $0.sign(digest, with: key) }
                #expect(raw.count == 64)
                let signature = try P256.Signing.ECDSASignature(rawRepresentation: raw)
                switch digest.count {
                case 32: #expect(publicKey.isValidSignature(signature, for: SHA256.hash(data: Self.message)))
                case 48: #expect(publicKey.isValidSignature(signature, for: SHA384.hash(data: Self.message)))
                default: #expect(publicKey.isValidSignature(signature, for: SHA512.hash(data: Self.message)))
                }
                #expect(!publicKey.isValidSignature(signature, for: SHA256.hash(data: Data("another".utf8))))
            }
            expectTPMError(.invalidArgument) {
                _ = try withConnection(configuration) { try $0.sign([UInt8](repeating: 1, count: 20), with: key) }
            }
        }
    }

    @Test(
        "A key-agreement key made in the TPM computes the same ECDH secret as swift-crypto on the other side, and the secret never crosses the bus in clear"
    )
    func keyAgreementMatchesSoftware() throws {
        try withRecordingProxy { proxy, configuration, _ in
            let key = try withConnection(configuration) { try $0.createKey(.keyAgreement) }
            let peer = P256.KeyAgreement.PrivateKey()
            proxy.reset()
            let ours = try withConnection(configuration) {
                try $0.sharedSecret(with: Array(peer.publicKey.x963Representation), using: key)
            }
            let theirs = try peer.sharedSecretFromKeyAgreement(
                with: P256.KeyAgreement.PublicKey(x963Representation: key.publicKey))
            #expect(ours.bytes == theirs.withUnsafeBytes { Array($0) })
            #expect(ours.count == 32)
            #expect(!proxy.recordedBytes().containsSubsequence(Array(ours.bytes.prefix(16))))
            #expect(proxy.commandCodes.contains(0x154)) // TPM2_ECDH_ZGen
        }
    }

    /// A signature with a key whose policy is PolicyAuthValue alone, in a fresh connection whose
    /// process already holds the storage key's context: ContextLoad, Load, StartAuthSession, Sign
    /// and FlushContext, after the sweep (GetCapability) and before the session's and the storage
    /// key's flushes at close. Issue 26 counts this path too.
    static let signatureBudget = 8

    @Test("A signature in a fresh connection sends at most its budget of TPM commands")
    func signatureCommandBudget() throws {
        try withRecordingProxy { proxy, configuration, _ in
            let key = try withConnection(configuration) { try $0.createKey(.signing) }
            proxy.reset()
            _ = try withConnection(configuration) { try $0.sign(Array(SHA256.hash(data: Self.message)), with: key) }
            let names = proxy.commandCodes.map(RecordingTPMProxy.commandName)
            print(
                "commands, TPM key signature: \(names.count) of \(Self.signatureBudget): \(names.joined(separator: ", "))"
            )
            #expect(names.count <= Self.signatureBudget, "\(names)")
            #expect(names.contains("Sign"))
        }
    }

    @Test(
        "Each key does only its own job; a malformed peer key is refused before the TPM, a point off the curve by the TPM"
    )
    func usagesAreSeparate() throws {
        try withSimulator { _, configuration in
            try withConnection(configuration) { tpm in
                let signing = try tpm.createKey(.signing)
                let agreement = try tpm.createKey(.keyAgreement)
                let peer = Array(P256.KeyAgreement.PrivateKey().publicKey.x963Representation)
                expectTPMError(.invalidArgument) { _ = try tpm.sharedSecret(with: peer, using: signing) }
                expectTPMError(.invalidArgument) {
                    _ = try tpm.sign(Array(SHA256.hash(data: Self.message)), with: agreement)
                }
                expectTPMError(.invalidArgument) {
                    _ = try tpm.sharedSecret(with: Array(peer.prefix(33)), using: agreement)
                }
                let offCurve = Self.changing(peer, at: 64) { $0 ^ 1 }
                do {
                    _ = try tpm.sharedSecret(with: offCurve, using: agreement)
                    Issue.record("the TPM multiplied a point off the curve")
                } catch {
                    #expect((error as? TPMError)?.layer == .tpm, "\(error)")
                }
                // The same blob parsed as the other usage is refused by the format.
                let swapped = Self.changing(agreement.serialized(), at: 6) { _ in TPMKeyUsage.signing.rawValue }
                expectTPMError(.malformedData) { _ = try TPMKey(serialized: swapped) }
            }
        }
    }

    @Test(
        "A key's blob round-trips, works only on the TPM that made it, and every single-byte change is refused, never used as another key"
    )
    func blobsAreBoundAndChecked() throws {
        try withSimulator { _, first in
            let key = try withConnection(first) { try $0.createKey(.signing) }
            let stored = key.serialized()
            #expect(try TPMKey(serialized: stored) == key)
            try withSimulator { _, second in
                try withConnection(second) { tpm in
                    expectTPMError(.wrongStorageKey) {
                        _ = try tpm.sign(Array(SHA256.hash(data: Self.message)), with: key)
                    }
                }
            }
            try withConnection(first) { tpm in
                let digest = Array(SHA256.hash(data: Self.message))
                let publicKey = try P256.Signing.PublicKey(x963Representation: key.publicKey)
                for position in stride(from: 0, to: stored.count, by: 3) {
                    let tampered = Self.changing(stored, at: position) { $0 ^ 0x5A }
                    guard let parsed = try? TPMKey(serialized: tampered) else { continue }
                    if let raw = try? tpm.sign(digest, with: parsed) {
                        // Only a change the key does not depend on may pass, and then it is the same key.
                        let signature = try P256.Signing.ECDSASignature(rawRepresentation: raw)
                        #expect(
                            publicKey.isValidSignature(signature, for: SHA256.hash(data: Self.message)),
                            "byte \(position) gave a signature by another key")
                    }
                }
            }
        }
    }

    @Test("A key made with a PIN signs only with it, and every wrong PIN counts toward the TPM's lockout")
    func pinIsCheckedByTheTPM() throws {
        try withSimulator { simulator, configuration in
            // With a recovery time of zero the TPM would not count failures at all.
            try simulator.setDictionaryAttackParameters(maxTries: 1000, recoveryTime: 3600, lockoutRecovery: 0)
            let pin = SecretBytes(copying: Array("key pin".utf8))
            try withConnection(configuration) { tpm in
                let key = try tpm.createKey(.signing, authValue: pin)
                #expect(key.isDictionaryAttackProtected)
                let digest = Array(SHA256.hash(data: Self.message))
                let before = try tpm.dictionaryAttackStatus().failedAuthorizations
                expectTPMError(.authorizationFailed) {
                    _ = try tpm.sign(digest, with: key, authValue: SecretBytes(copying: Array("wrong".utf8)))
                }
                #expect(try tpm.dictionaryAttackStatus().failedAuthorizations == before + 1)
                #expect(try tpm.sign(digest, with: key, authValue: pin).count == 64)
            }
        }
    }

    @Test(
        "A key bound to an NV counter's value (as biometryCurrentSet binds to the enrollment) signs until the counter moves, then never again"
    )
    func policyBoundKeyIsInvalidatedByTheTPM() throws {
        try withSimulator { _, configuration in
            let counter: UInt32 = 0x0150_0050
            try withConnection(configuration) { tpm in
                try tpm.defineNVIndex(counter, kind: .counter)
                try tpm.incrementNVCounter(counter)
                let policy = Policy([
                    .authValue, try tpm.counterUnchangedAssertion(counter), .commandCode(CommandCode.sign),
                ])
                let key = try tpm.createKey(.signing, policy: policy)
                #expect(!key.usableWithAuthValue)
                let digest = Array(SHA256.hash(data: Self.message))
                #expect(try tpm.sign(digest, with: key, policy: policy).count == 64)
                expectTPMError(.policyCheckFailed) { _ = try tpm.sign(digest, with: key) }
                try tpm.incrementNVCounter(counter)
                expectTPMError(.policyCheckFailed) { _ = try tpm.sign(digest, with: key, policy: policy) }
                try tpm.undefineNVIndex(counter)
            }
        }
    }

    /// `bytes` with the byte at `position` replaced by `change` of it.
    static func changing(_ bytes: [UInt8], at position: Int, _ change: (UInt8) -> UInt8) -> [UInt8] {
        var changed = bytes
        changed[position] = change(changed[position])
        return changed
    }
}
