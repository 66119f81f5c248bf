import TPMKeychainTesting
import Testing

@testable import TPM

@Suite struct SealingTests {
    @Test func generatedKeyRoundTripsThroughItsSerializedForm() throws {
        try withSimulator { _, configuration in
            let (key, sealed) = try withConnection(configuration) { try $0.generateSealedKey() }
            #expect(key.count == 32)
            #expect(key.bytes != [UInt8](repeating: 0, count: 32))
            let stored = sealed.serialized()
            let restored = try SealedObject(serialized: stored)
            #expect(restored == sealed)
            let unsealed = try withConnection(configuration) { try $0.unseal(restored) }
            #expect(unsealed == key)
        }
    }

    @Test func twoGeneratedKeysDiffer() throws {
        try withSimulator { _, configuration in
            try withConnection(configuration) { tpm in
                let first = try tpm.generateSealedKey().key
                let second = try tpm.generateSealedKey().key
                #expect(first != second)
            }
        }
    }

    @Test func sealsCallerSecretsOfEveryAllowedSize() throws {
        try withSimulator { _, configuration in
            try withConnection(configuration) { tpm in
                for size in [1, 32, 128] {
                    let secret = SecretBytes(copying: distinctSecret(UInt8(size), count: size))
                    let unsealed = try tpm.unseal(tpm.seal(secret))
                    #expect(unsealed == secret)
                }
            }
        }
    }

    @Test func rejectsOutOfRangeInputsWithTypedErrors() throws {
        try withSimulator { _, configuration in
            try withConnection(configuration) { tpm in
                expectTPMError(.invalidArgument) { _ = try tpm.seal(SecretBytes(copying: [UInt8]())) }
                expectTPMError(.invalidArgument) {
                    _ = try tpm.seal(SecretBytes(copying: distinctSecret(1, count: 129)))
                }
                expectTPMError(.invalidArgument) {
                    _ = try tpm.seal(
                        SecretBytes(copying: [1]), authValue: SecretBytes(copying: distinctSecret(2, count: 33)))
                }
                let counterless = Policy([])
                expectTPMError(.invalidArgument) {
                    _ = try tpm.seal(
                        SecretBytes(copying: [1]), policy: counterless, authValue: SecretBytes(copying: [1, 2, 3]))
                }
                expectTPMError(.invalidArgument) { _ = try tpm.randomBytes(count: 33) }
            }
        }
    }

    @Test func pinIsRequiredAndCheckedByTheTPM() throws {
        try withSimulator { _, configuration in
            try withConnection(configuration) { tpm in
                let pin = SecretBytes(copying: Array("1234".utf8))
                let (key, sealed) = try tpm.generateSealedKey(authValue: pin)
                #expect(try tpm.unseal(sealed, authValue: pin) == key)
                expectTPMError(.authorizationFailed) {
                    _ = try tpm.unseal(sealed, authValue: SecretBytes(copying: Array("1235".utf8)))
                }
                expectTPMError(.authorizationFailed) { _ = try tpm.unseal(sealed) }
            }
        }
    }

    @Test("Wrong PINs end in dictionary-attack lockout, which a lockout reset lifts")
    func dictionaryAttackLockout() throws {
        try withSimulator { simulator, configuration in
            try simulator.setDictionaryAttackParameters(maxTries: 3, recoveryTime: 1000, lockoutRecovery: 1000)
            let pin = SecretBytes(copying: Array("correct horse".utf8))
            let wrong = SecretBytes(copying: Array("battery staple".utf8))
            let (key, sealed) = try withConnection(configuration) { try $0.generateSealedKey(authValue: pin) }
            try withConnection(configuration) { tpm in
                for _ in 0..<3 {
                    expectTPMError(.authorizationFailed) { _ = try tpm.unseal(sealed, authValue: wrong) }
                }
                expectTPMError(.lockout) { _ = try tpm.unseal(sealed, authValue: wrong) }
                expectTPMError(.lockout) { _ = try tpm.unseal(sealed, authValue: pin) }
            }
            try simulator.resetDictionaryAttackLockout()
            #expect(try withConnection(configuration) { try $0.unseal(sealed, authValue: pin) } == key)
        }
    }

    @Test func aPolicyOtherThanTheSealedOneIsRefusedBeforeTheTPMIsAsked() throws {
        try withSimulator { _, configuration in
            try withConnection(configuration) { tpm in
                let sealed = try tpm.seal(SecretBytes(copying: [7, 7, 7]))
                let selection = try PCRSelection([16])
                let other = Policy([.authValue, .pcrs(selection, expectedDigest: [UInt8](repeating: 0, count: 32))])
                expectTPMError(.policyCheckFailed) { _ = try tpm.unseal(sealed, policy: other) }
            }
        }
    }

    @Test(
        "An object sealed with PolicyAuthValue alone also accepts its value in an HMAC session (userWithAuth): no policy commands, the PIN still checked; any other policy never carries userWithAuth, and a stored object claiming it beside another policy is refused"
    )
    func authValueAloneUnsealsInAnHMACSession() throws {
        try withRecordingProxy { proxy, configuration, _ in
            let pin = SecretBytes(copying: Array("pin".utf8))
            let (key, sealed) = try withConnection(configuration) { try $0.generateSealedKey() }
            let pinned = try withConnection(configuration) { try $0.seal(SecretBytes(copying: [9]), authValue: pin) }
            #expect(sealed.unsealsWithAuthValue && pinned.unsealsWithAuthValue)
            proxy.reset()
            #expect(try withConnection(configuration) { try $0.unseal(sealed) } == key)
            let codes = proxy.commandCodes
            #expect(codes.contains(0x15E)) // TPM2_Unseal
            #expect(!codes.contains(0x16B), "PolicyAuthValue was sent: \(codes)")
            #expect(try withConnection(configuration) { try $0.unseal(pinned, authValue: pin) }.bytes == [9])
            expectTPMError(.authorizationFailed) {
                _ = try withConnection(configuration) {
                    try $0.unseal(pinned, authValue: SecretBytes(copying: Array("nip".utf8)))
                }
            }

            let policy = Policy([.authValue, .unsealOnly])
            let bound = try withConnection(configuration) { try $0.seal(SecretBytes(copying: [1]), policy: policy) }
            #expect(!bound.unsealsWithAuthValue)
            #expect(try withConnection(configuration) { try $0.unseal(bound, policy: policy) }.bytes == [1])
            // The same object with userWithAuth set in its stored public area: the format refuses it
            // before the TPM is asked (the TPM would refuse to load it anyway, its name changed).
            var stored = bound.serialized()
            let attributes = 4 + 2 + 2 + 2 + bound.storageKeyName.count + 2 + 2 + 2 + 2
            stored[attributes + 3] |= 0x40 // TPMA_OBJECT userWithAuth, bit 6
            expectTPMError(.malformedData) { _ = try SealedObject(serialized: stored) }
        }
    }

    @Test("An object sealed on one TPM cannot be unsealed on another")
    func hardwareBinding() throws {
        try withSimulator { _, first in
            try withSimulator { _, second in
                let (_, sealed) = try withConnection(first) { try $0.generateSealedKey() }
                try withConnection(second) { tpm in
                    expectTPMError(.wrongStorageKey) { _ = try tpm.unseal(sealed) }
                }
            }
        }
    }

    @Test("Sealed objects survive a reboot of the TPM")
    func survivesPowerCycle() throws {
        try withSimulator { simulator, configuration in
            let (key, sealed) = try withConnection(configuration) { try $0.generateSealedKey() }
            try simulator.powerCycle()
            #expect(try withConnection(configuration) { try $0.unseal(sealed) } == key)
        }
    }

    @Test("Every single-byte change to a sealed object is refused, never unsealed to other data")
    func tamperedBlobsAreRefused() throws {
        try withSimulator { _, configuration in
            try withConnection(configuration) { tpm in
                let secret = SecretBytes(copying: distinctSecret(42))
                let stored = try tpm.seal(secret).serialized()
                var refusals: [TPMError.Layer: Int] = [:]
                for position in stored.indices {
                    var tampered = stored
                    tampered[position] ^= 0x5A
                    do {
                        let unsealed = try tpm.unseal(try SealedObject(serialized: tampered))
                        // Only a change the format does not rely on could pass, and it must give the same secret.
                        #expect(unsealed == secret, "byte \(position) changed the secret")
                        Issue.record("flipping byte \(position) went unnoticed")
                    } catch let error as TPMError {
                        #expect(error.code != .other || error.responseCode != 0, "byte \(position): \(error)")
                        refusals[error.layer, default: 0] += 1
                    }
                }
                // Both guards took part: the format's own checks and the TPM's integrity checks.
                #expect(refusals.values.reduce(0, +) == stored.count)
                #expect((refusals[.library] ?? 0) > 0)
                #expect((refusals[.tpm] ?? 0) > 100, "\(refusals)")
            }
        }
    }

    @Test func truncatedOrPaddedBlobsAreMalformed() throws {
        try withSimulator { _, configuration in
            let stored = try withConnection(configuration) {
                try $0.seal(SecretBytes(copying: [1, 2, 3])).serialized()
            }
            for length in 0..<stored.count {
                expectTPMError(.malformedData) { _ = try SealedObject(serialized: Array(stored.prefix(length))) }
            }
            expectTPMError(.malformedData) { _ = try SealedObject(serialized: stored + [0]) }
        }
    }

    @Test func unsealedSecretIsScrubbedFromTheTSSBuffer() throws {
        try withSimulator { _, configuration in
            try withConnection(configuration) { tpm in
                let secret = distinctSecret(99)
                let sealed = try tpm.seal(SecretBytes(copying: secret))
                let unsealed = try tpm.unseal(sealed)
                #expect(unsealed.bytes == secret)
                let leftOver = try tpm.responseBufferContents()
                #expect(!leftOver.containsSubsequence(Array(secret.prefix(16))))
            }
        }
    }
}
