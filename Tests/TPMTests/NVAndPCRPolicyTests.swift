import TPMKeychainTesting
import Testing

@testable import TPM

@Suite struct NVAndPCRPolicyTests {
    static let counter: UInt32 = 0x0150_0010
    static let storage: UInt32 = 0x0150_0011

    @Test func nvCounterDefineIncrementRead() throws {
        try withSimulator { _, configuration in
            try withConnection(configuration) { tpm in
                try tpm.defineNVIndex(Self.counter, kind: .counter)
                expectTPMError(.nvIndexUninitialized) { _ = try tpm.readNVCounter(Self.counter) }
                try tpm.incrementNVCounter(Self.counter)
                let first = try tpm.readNVCounter(Self.counter)
                try tpm.incrementNVCounter(Self.counter)
                #expect(try tpm.readNVCounter(Self.counter) == first + 1)
                expectTPMError(.nvIndexAlreadyDefined) { try tpm.defineNVIndex(Self.counter, kind: .counter) }
                try tpm.undefineNVIndex(Self.counter)
                expectTPMError(.handleNotFound) { try tpm.undefineNVIndex(Self.counter) }
                expectTPMError(.invalidArgument) { try tpm.defineNVIndex(0x8100_0001, kind: .counter) }
            }
        }
    }

    @Test(
        "A declared index is named without NV_ReadPublic when an HMAC session authorizes the command; ESAPI's own serialization of the index is byte for byte the one built from the declaration; a wrong declaration only costs a read"
    )
    func declaredIndicesNeedNoRead() throws {
        try withRecordingProxy { proxy, configuration, _ in
            let auth = SecretBytes(copying: Array("counter auth".utf8))
            let index: UInt32 = 0x0150_0040
            try withConnection(configuration) { tpm in
                try tpm.defineNVIndex(index, kind: .counter, authValue: auth, options: .noDictionaryAttack)
                try tpm.incrementNVCounter(index, authValue: auth)
            }
            let definition = NVPublicArea(index: index, kind: .counter, options: .noDictionaryAttack)
            let serialized = try withConnection(configuration) { tpm in
                try tpm.withEngine { engine in
                    try engine.withNVIndex(index, fresh: true) { try engine.serializedHandle($0) }
                }
            }
            #expect(serialized == Engine.serializedResource(of: definition))

            proxy.reset()
            let value = try withConnection(configuration) { tpm in try tpm.readNVCounter(index, authValue: auth) }
            #expect(value > 0)
            #expect(!proxy.commandCodes.contains(0x169), "\(proxy.commandCodes.map(RecordingTPMProxy.commandName))")

            // Declared as something else: the HMAC fails on the name, the index is read, the read succeeds.
            try withConnection(configuration) { tpm in
                tpm.expectNVIndex(index, kind: .ordinary(size: 8), options: .noDictionaryAttack)
            }
            proxy.reset()
            #expect(try withConnection(configuration) { tpm in try tpm.readNVCounter(index, authValue: auth) } == value)
            #expect(proxy.commandCodes.contains(0x169)) // TPM2_NV_ReadPublic
            // Sent twice: once under the declared (wrong) name, refused, then under the name read.
            #expect(proxy.commandCodes.filter { $0 == 0x14E }.count == 2) // TPM2_NV_Read
            // A wrong authorization is still refused, with or without a declaration.
            try withConnection(configuration) { tpm in
                tpm.expectNVIndex(index, kind: .counter, options: .noDictionaryAttack)
                expectTPMError(.authorizationFailed) {
                    _ = try tpm.readNVCounter(index, authValue: SecretBytes(copying: Array("wrong".utf8)))
                }
                try tpm.undefineNVIndex(index)
            }
        }
    }

    @Test("definedNVIndices lists exactly the indices of a range, with neighbours on both sides left out")
    func listsTheIndicesOfARange() throws {
        try withSimulator { _, configuration in
            try withConnection(configuration) { tpm in
                let handles: [UInt32] = (0..<12).map { 0x01A0_0000 + $0 * 3 }
                for handle in handles { try tpm.defineNVIndex(handle, kind: .ordinary(size: 1)) }
                #expect(try tpm.definedNVIndices(in: 0x01A0_0000..<0x01A1_0000) == Set(handles))
                #expect(try tpm.definedNVIndices(in: 0x01A0_0003..<0x01A0_0021) == Set(handles[1..<11]))
                #expect(try tpm.definedNVIndices(in: 0x01B0_0000..<0x01C0_0000).isEmpty)
                for handle in handles { try tpm.undefineNVIndex(handle) }
                #expect(try tpm.definedNVIndices(in: 0x01A0_0000..<0x01A1_0000).isEmpty)
            }
        }
    }

    @Test(
        "A counter read that ends the connection's sessions spares the close one FlushContext and leaves no session loaded"
    )
    func counterReadEndingTheKeptSession() throws {
        try withRecordingProxy { proxy, configuration, simulator in
            let auth = SecretBytes(copying: Array("counter auth".utf8))
            let index: UInt32 = 0x0150_0041
            let secret = SecretBytes(copying: distinctSecret(7))
            try withConnection(configuration) { tpm in
                try tpm.defineNVIndex(index, kind: .counter, authValue: auth, options: .noDictionaryAttack)
                try tpm.incrementNVCounter(index, authValue: auth)
            }
            let sealed = try withConnection(configuration) { tpm in try tpm.seal(secret) }
            var flushes: [Bool: Int] = [:]
            var values: [Bool: UInt64] = [:]
            for ending in [false, true] {
                proxy.reset()
                try withConnection(configuration) { tpm in
                    tpm.expectNVIndex(index, kind: .counter, options: .noDictionaryAttack)
                    // The unseal starts the connection's salted session; the read shares it.
                    #expect(try tpm.unseal(sealed) == secret)
                    values[ending] = try tpm.readNVCounter(index, authValue: auth, endingSessions: ending)
                }
                let names = proxy.commandCodes.map(RecordingTPMProxy.commandName)
                #expect(proxy.commandCodes.filter { $0 == 0x176 }.count == 1, "\(names)") // one StartAuthSession
                flushes[ending] = proxy.commandCodes.filter { $0 == 0x165 }.count // TPM2_FlushContext
                #expect(try listedHandles("loaded-session", simulator).isEmpty, "ending: \(ending), \(names)")
                #expect(try listedHandles("transient", simulator).isEmpty, "ending: \(ending), \(names)")
            }
            #expect(values[true] == values[false])
            #expect(flushes[true] == (flushes[false] ?? 0) - 1, "\(flushes)")
            // The next connection starts a session of its own and reads the same value.
            #expect(
                try withConnection(configuration) { tpm in try tpm.readNVCounter(index, authValue: auth) }
                    == values[true])
        }
    }

    @Test func nvDataWriteReadWithAnAuthValue() throws {
        try withSimulator { _, configuration in
            try withConnection(configuration) { tpm in
                let auth = SecretBytes(copying: Array("nv-secret".utf8))
                try tpm.defineNVIndex(Self.storage, kind: .ordinary(size: 32), authValue: auth)
                let data = SecretBytes(copying: distinctSecret(5))
                try tpm.writeNV(Self.storage, data: data, authValue: auth)
                #expect(try tpm.readNV(Self.storage, count: 32, authValue: auth) == data)
                expectTPMError(.authorizationFailed) {
                    _ = try tpm.readNV(Self.storage, count: 32, authValue: SecretBytes(copying: Array("guess".utf8)))
                }
            }
        }
    }

    @Test(
        "Sealed under PolicyNV(counter == g): readable at g, never again once the counter moves, not even after undefine and redefine"
    )
    func counterPolicyCannotBeRolledBack() throws {
        try withSimulator { _, configuration in
            try withConnection(configuration) { tpm in
                try tpm.defineNVIndex(Self.counter, kind: .counter)
                try tpm.incrementNVCounter(Self.counter)
                let generation = try tpm.readNVCounter(Self.counter)
                let policy = Policy([.authValue, try tpm.counterUnchangedAssertion(Self.counter)])
                let (key, sealed) = try tpm.generateSealedKey(policy: policy)
                #expect(try tpm.unseal(sealed, policy: policy) == key)

                try tpm.incrementNVCounter(Self.counter)
                expectTPMError(.policyCheckFailed) { _ = try tpm.unseal(sealed, policy: policy) }

                // Take the counter away and make it again with the same attributes.
                try tpm.undefineNVIndex(Self.counter)
                try tpm.defineNVIndex(Self.counter, kind: .counter)
                expectTPMError(.nvIndexUninitialized) { _ = try tpm.unseal(sealed, policy: policy) }
                try tpm.incrementNVCounter(Self.counter)
                #expect(try tpm.readNVCounter(Self.counter) > generation)
                expectTPMError(.policyCheckFailed) { _ = try tpm.unseal(sealed, policy: policy) }
            }
        }
    }

    @Test("Sealed under PolicyPCR: readable until the PCR is extended")
    func pcrPolicy() throws {
        try withSimulator { _, configuration in
            try withConnection(configuration) { tpm in
                let selection = try PCRSelection([16])
                let policy = Policy([.authValue, try tpm.currentPCRAssertion(selection)])
                #expect(try tpm.trialPolicyDigest(policy) == policy.digest)
                let (key, sealed) = try tpm.generateSealedKey(policy: policy)
                #expect(try tpm.unseal(sealed, policy: policy) == key)
                try tpm.extendPCR(16, with: distinctSecret(3))
                expectTPMError(.policyCheckFailed) { _ = try tpm.unseal(sealed, policy: policy) }
            }
        }
    }
}
