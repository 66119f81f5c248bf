import SystemCalls
import WireFormat

// Splits the client-to-TPM byte stream into TPM commands (TPM 2.0 Part 1 §18.2 header: tag
// UINT16, commandSize UINT32, commandCode UINT32, big-endian), however TCP chops it up.

struct CommandStreamParser: Sendable {
    static let headerSize = 10
    private var header: [UInt8] = []
    /// Bytes of the current command after its header that are still to come.
    private var remainingBody = 0

    /// Consumes the next chunk of the stream and returns the codes of commands whose header
    /// completed within it.
    mutating func consume(_ bytes: some Collection<UInt8>) -> [UInt32] {
        var codes: [UInt32] = []
        var index = bytes.startIndex
        while index != bytes.endIndex {
            if remainingBody > 0 {
                let skip = min(remainingBody, bytes.distance(from: index, to: bytes.endIndex))
                remainingBody -= skip
                index = bytes.index(index, offsetBy: skip)
                continue
            }
            header.append(bytes[index])
            index = bytes.index(after: index)
            if header.count == Self.headerSize {
                let size = Int(Self.bigEndianUInt32(header, at: 2))
                codes.append(Self.bigEndianUInt32(header, at: 6))
                // A size below the header size is malformed; the TPM rejects it, and we resync
                // on the next byte rather than skipping a negative amount.
                remainingBody = max(0, size - Self.headerSize)
                header.removeAll(keepingCapacity: true)
            }
        }
        return codes
    }

    private static func bigEndianUInt32(_ bytes: [UInt8], at offset: Int) -> UInt32 {
        BigEndian.integer(bytes[offset..<offset + 4])
    }
}
