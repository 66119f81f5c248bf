import Foundation

/// Fixtures/policy-digests.json.
struct PolicyDigestVectors: Decodable {
    struct NVIndex: Decodable {
        let index: String
        let kind: String
        let written: Bool
        let name: String
    }

    struct Step: Decodable {
        let command: String
        let pcrs: [Int]?
        let values: [String]?
        let index: String?
        let operand: String?
        let offset: UInt16?
        let comparison: String?
    }

    struct Vector: Decodable {
        let name: String
        let steps: [Step]
        let digest: String
    }

    let nvIndices: [NVIndex]
    let vectors: [Vector]
}
