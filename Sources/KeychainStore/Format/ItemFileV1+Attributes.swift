import Crypto
import FoundationEssentials
import KeychainVocabulary
import TPM
import WireFormat

// Format 1's attributes plaintext: its encoding and its strict decoding.
extension ItemFileV1 {
    static func encodeAttributes(_ attributes: ItemAttributes) -> [UInt8] {
        var writer = WireWriter()
        writer.appendSized(Array(attributes.accessGroupName.utf8))
        writer.appendSized(Array(attributes.service.utf8))
        writer.appendSized(Array(attributes.account.utf8))
        appendOptional(&writer, attributes.label.map { Array($0.utf8) }, wide: false)
        appendOptional(&writer, attributes.comment.map { Array($0.utf8) }, wide: false)
        appendOptional(&writer, attributes.genericData.map { Array($0) }, wide: true)
        writer.append(UInt64(bitPattern: Int64((attributes.creationDate.timeIntervalSince1970 * 1000).rounded())))
        writer.append(UInt64(bitPattern: Int64((attributes.modificationDate.timeIntervalSince1970 * 1000).rounded())))
        return writer.bytes
    }

    private static func appendOptional(_ writer: inout WireWriter, _ bytes: [UInt8]?, wide: Bool) {
        guard let bytes else { return writer.append(UInt8(0)) }
        writer.append(UInt8(1))
        if wide { writer.append(UInt32(bytes.count)) } else { writer.append(UInt16(bytes.count)) }
        writer.append(raw: bytes)
    }

    static func decodeAttributes(
        _ plaintext: [UInt8], header: Header, path: String
    ) throws(KeychainError) -> ItemAttributes {
        do {
            var reader = WireReader(plaintext)
            func text(_ maximum: Int) throws -> String {
                let bytes = try reader.readSized(maximum: maximum)
                guard let string = String(validating: bytes, as: UTF8.self) else { throw KeychainError(.tampered, "") }
                return string
            }
            func optional(_ maximum: Int, wide: Bool) throws -> [UInt8]? {
                guard try reader.readUInt8() == 1 else { return nil }
                let count = wide ? Int(try reader.readUInt32()) : Int(try reader.readUInt16())
                guard count <= maximum else { throw KeychainError(.tampered, "") }
                return try reader.readBytes(count)
            }
            let accessGroup = try text(ItemIdentity.maximumNameBytes)
            let service = try text(ItemIdentity.maximumNameBytes)
            let account = try text(ItemIdentity.maximumNameBytes)
            let label = try optional(maximumLabelBytes, wide: false).map { String(decoding: $0, as: UTF8.self) }
            let comment = try optional(maximumLabelBytes, wide: false).map { String(decoding: $0, as: UTF8.self) }
            let generic = try optional(maximumGenericDataBytes, wide: true).map { Data($0) }
            let created = Int64(bitPattern: try reader.readUInt64())
            let modified = Int64(bitPattern: try reader.readUInt64())
            guard reader.remaining == 0 else { throw KeychainError(.tampered, "") }
            return ItemAttributes(
                service: service, account: account, accessGroupName: accessGroup, label: label, comment: comment,
                genericData: generic, creationDate: Date(timeIntervalSince1970: Double(created) / 1000),
                modificationDate: Date(timeIntervalSince1970: Double(modified) / 1000),
                accessibility: header.accessibility)
        } catch {
            // Authenticated but undecodable: written by a broken writer; still never trusted.
            throw KeychainError(.tampered, "\(path) has undecodable attributes")
        }
    }
}
