import Crypto
import WireFormat

/// A SHA-256 policy digest (TPM 2.0 Part 1 §19.7), computed in Swift the way the TPM extends
/// `policySession→policyDigest`, so a sealed object's authPolicy is known without a TPM round trip.
public struct PolicyDigest: Sendable, Hashable, CustomStringConvertible {
    /// 32 bytes.
    public let bytes: [UInt8]

    /// The digest every policy session starts from: 32 zero bytes.
    public static let initial = PolicyDigest(unchecked: [UInt8](repeating: 0, count: 32))

    /// - Throws: ``TPMError`` with code `.invalidArgument` unless `bytes` has 32 bytes.
    public init(_ bytes: [UInt8]) throws(TPMError) {
        guard bytes.count == 32 else {
            throw TPMError(.invalidArgument, "A SHA-256 policy digest has 32 bytes, not \(bytes.count)")
        }
        self.bytes = bytes
    }

    init(unchecked bytes: [UInt8]) { self.bytes = bytes }

    public var description: String { bytes.hexString }

    /// policyDigest_new = H(policyDigest_old || commandCode || arguments).
    func extended(commandCode: UInt32, _ arguments: [UInt8]) -> PolicyDigest {
        var writer = WireWriter()
        writer.append(raw: bytes)
        writer.append(commandCode)
        writer.append(raw: arguments)
        return PolicyDigest(unchecked: Array(SHA256.hash(data: writer.bytes)))
    }
}

/// TPM 2.0 Part 2 §6.9 TPM_EO: how PolicyNV compares the NV contents (operand A) with operand B.
public enum NVComparison: UInt16, Sendable, Hashable, Codable {
    case equal = 0x0000
    case notEqual = 0x0001
    case signedGreaterThan = 0x0002
    case unsignedGreaterThan = 0x0003
    case signedLessThan = 0x0004
    case unsignedLessThan = 0x0005
    case signedGreaterOrEqual = 0x0006
    case unsignedGreaterOrEqual = 0x0007
    case signedLessOrEqual = 0x0008
    case unsignedLessOrEqual = 0x0009
    case bitSet = 0x000A
    case bitClear = 0x000B
}

/// One policy command, in the order it is run and hashed.
public enum PolicyAssertion: Sendable, Hashable {
    /// TPM2_PolicyAuthValue (Part 3 §23.17): the object's authorization value (a PIN, possibly
    /// empty) must be proven by HMAC, never sent in clear.
    case authValue
    /// TPM2_PolicyNV (Part 3 §23.9): the NV index's contents at `offset`, compared with `operand`,
    /// must satisfy `comparison`. `indexName` is the index's name (which includes TPMA_NV_WRITTEN).
    case nv(index: UInt32, indexName: [UInt8], operand: [UInt8], offset: UInt16, comparison: NVComparison)
    /// TPM2_PolicyPCR (Part 3 §23.7): the selected SHA-256 PCRs must hash to `expectedDigest`.
    case pcrs(PCRSelection, expectedDigest: [UInt8])
    /// TPM2_PolicyCommandCode (Part 3 §23.11): the session authorizes only that command, so a
    /// satisfied session cannot be spent on anything else.
    case commandCode(UInt32)

    /// PolicyCommandCode(TPM2_Unseal): the session may only unseal.
    public static let unsealOnly = PolicyAssertion.commandCode(CommandCode.unseal)

    /// This assertion applied to `digest`, per Part 3's "policyDigest update" of each command.
    public func applied(to digest: PolicyDigest) -> PolicyDigest {
        switch self {
        case .authValue:
            return digest.extended(commandCode: CommandCode.policyAuthValue, [])
        case .nv(_, let indexName, let operand, let offset, let comparison):
            var arguments = WireWriter()
            arguments.append(raw: operand)
            arguments.append(offset)
            arguments.append(comparison.rawValue)
            let argumentHash = Array(SHA256.hash(data: arguments.bytes))
            return digest.extended(commandCode: CommandCode.policyNV, argumentHash + indexName)
        case .pcrs(let selection, let expectedDigest):
            return digest.extended(commandCode: CommandCode.policyPCR, selection.marshalled + expectedDigest)
        case .commandCode(let code):
            var argument = WireWriter()
            argument.append(code)
            return digest.extended(commandCode: CommandCode.policyCommandCode, argument.bytes)
        }
    }
}

/// An ordered list of policy assertions; its ``digest`` is what a sealed object's authPolicy holds.
public struct Policy: Sendable, Hashable {
    public var assertions: [PolicyAssertion]

    public init(_ assertions: [PolicyAssertion]) { self.assertions = assertions }

    /// The policy that only asks for the object's authorization value (empty when there is no PIN).
    public static let authValue = Policy([.authValue])

    /// The digest the TPM reaches after running ``assertions`` in order from ``PolicyDigest/initial``.
    public var digest: PolicyDigest {
        assertions.reduce(PolicyDigest.initial) { $1.applied(to: $0) }
    }

    /// Whether the object's authorization value takes part (then its HMAC proves the PIN).
    var usesAuthValue: Bool { assertions.contains(.authValue) }
}

/// A set of SHA-256 PCRs (TPMS_PCR_SELECTION with a 3-byte bitmap: PCRs 0-23).
public struct PCRSelection: Sendable, Hashable {
    public let indices: [Int]

    /// - Throws: ``TPMError`` `.invalidArgument` for indices outside 0...23 or an empty set.
    public init(_ indices: some Sequence<Int>) throws(TPMError) {
        let sorted = Array(Set(indices)).sorted()
        guard let first = sorted.first, let last = sorted.last, first >= 0, last <= 23 else {
            throw TPMError(.invalidArgument, "PCR selections name PCRs 0 to 23, at least one")
        }
        self.indices = sorted
    }

    /// TPML_PCR_SELECTION: count = 1, then hash, sizeofSelect = 3 and the bitmap.
    var marshalled: [UInt8] {
        var bitmap: [UInt8] = [0, 0, 0]
        for index in indices { bitmap[index / 8] |= 1 << (index % 8) }
        var writer = WireWriter()
        writer.append(UInt32(1))
        writer.append(AlgorithmID.sha256)
        writer.append(UInt8(3))
        writer.append(raw: bitmap)
        return writer.bytes
    }

    /// The PCR digest PolicyPCR expects: H(PCR values concatenated in ascending index order).
    public static func digest(ofValues values: [[UInt8]]) -> [UInt8] {
        Array(SHA256.hash(data: values.flatMap { $0 }))
    }
}
