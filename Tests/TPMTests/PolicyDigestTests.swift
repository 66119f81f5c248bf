import TPMKeychainTesting
import Testing
import WireFormat

@testable import TPM

/// Policy digests computed in Swift against tpm2-tools' vectors and against the TPM itself.
@Suite struct PolicyDigestTests {
    static let vectors: PolicyDigestVectors = {
        do { return try ProjectFixtures.load("policy-digests.json", as: PolicyDigestVectors.self) } catch {
            preconditionFailure("Fixtures/policy-digests.json is unreadable: \(error)")
        }
    }()

    static let comparisons: [String: NVComparison] = [
        "equal": .equal, "notEqual": .notEqual, "unsignedLessOrEqual": .unsignedLessOrEqual,
        "unsignedGreaterOrEqual": .unsignedGreaterOrEqual,
    ]

    static func policy(for vector: PolicyDigestVectors.Vector) throws -> Policy {
        let names = Dictionary(uniqueKeysWithValues: vectors.nvIndices.map { ($0.index, $0.name) })
        return Policy(
            try vector.steps.map { step -> PolicyAssertion in
                switch step.command {
                case "PolicyAuthValue":
                    return .authValue
                case "PolicyPCR":
                    let values = try required(step.values).map { try required([UInt8](hexString: $0)) }
                    return .pcrs(
                        try PCRSelection(try required(step.pcrs)), expectedDigest: PCRSelection.digest(ofValues: values)
                    )
                case "PolicyNV":
                    let index = try required(step.index)
                    return .nv(
                        index: try required(UInt32(index, radix: 16)),
                        indexName: try required([UInt8](hexString: try required(names[index]))),
                        operand: try required([UInt8](hexString: try required(step.operand))),
                        offset: try required(step.offset),
                        comparison: try required(comparisons[try required(step.comparison)]))
                default:
                    Issue.record("unknown policy command \(step.command)")
                    return .authValue
                }
            })
    }

    @Test("Swift digests equal tpm2-tools' known answers", arguments: vectors.vectors.map(\.name))
    func knownAnswer(_ name: String) throws {
        let vector = try #require(Self.vectors.vectors.first { $0.name == name })
        #expect(try Self.policy(for: vector).digest.description == vector.digest)
    }

    @Test func nvIndexNameIsComputedLikeTheTPM() throws {
        let fixture = try #require(Self.vectors.nvIndices.first)
        let area = NVPublicArea(index: try #require(UInt32(fixture.index, radix: 16)), kind: .counter)
        #expect(area.name(written: true).hexString == fixture.name)
        #expect(area.name(written: false).hexString != fixture.name)
    }

    @Test func policyDigestRejectsWrongLengths() {
        expectTPMError(.invalidArgument) { _ = try PolicyDigest([1, 2, 3]) }
        expectTPMError(.invalidArgument) { _ = try PCRSelection([24]) }
        expectTPMError(.invalidArgument) { _ = try PCRSelection([]) }
    }

    @Test("The TPM's trial sessions reach the same digests")
    func trialSessionsAgree() throws {
        try withSimulator { _, configuration in
            try withConnection(configuration) { tpm in
                let fixture = try #require(Self.vectors.nvIndices.first)
                let index = try #require(UInt32(fixture.index, radix: 16))
                try tpm.defineNVIndex(index, kind: .counter)
                for _ in 0..<5 { try tpm.incrementNVCounter(index) }
                #expect(try tpm.nvIndexName(index).hexString == fixture.name)
                for vector in Self.vectors.vectors {
                    let policy = try Self.policy(for: vector)
                    #expect(try tpm.trialPolicyDigest(policy) == policy.digest, "\(vector.name)")
                }
            }
        }
    }
}
