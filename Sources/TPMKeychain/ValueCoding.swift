import FoundationEssentials
import KeychainVocabulary

/// How typed values become item bytes and back.
///
/// Data is stored as is; String as UTF-8; Bool, Int and Double as their decimal text (what
/// Keychain code ported from iOS usually stores, and readable by `security`-style tools); every
/// other Codable value as JSON with sorted keys.
enum ValueCoding {
    static func encode<Value: Encodable>(_ value: Value) throws(KeychainError) -> ItemValue {
        switch value {
        case let data as Data: return ItemValue(kind: .data, bytes: Array(data))
        case let string as String: return ItemValue(kind: .string, bytes: Array(string.utf8))
        case let bool as Bool: return ItemValue(kind: .bool, bytes: Array((bool ? "true" : "false").utf8))
        case let integer as Int: return ItemValue(kind: .integer, bytes: Array(String(integer).utf8))
        case let double as Double: return ItemValue(kind: .double, bytes: Array(String(double).utf8))
        default:
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.sortedKeys]
            do {
                return ItemValue(kind: .json, bytes: Array(try encoder.encode(value)))
            } catch {
                throw KeychainError(.invalidParameter, "The value cannot be encoded as JSON", underlying: error)
            }
        }
    }

    static func decode<Value: Decodable>(
        _ value: ItemValue, as type: Value.Type, key: String
    ) throws(KeychainError) -> Value {
        // Each kind is cast straight to `Value`: specialised for Data or String the cast is
        // free, where boxing every value in an Any first cost a dynamic cast on every get.
        let decoded: Value?
        if type == Data.self {
            decoded = Data(value.bytes) as? Value
        } else if type == String.self {
            decoded = String(validating: value.bytes, as: UTF8.self) as? Value
        } else if type == Bool.self {
            decoded = text(value).flatMap { ["true": true, "false": false, "1": true, "0": false][$0] } as? Value
        } else if type == Int.self {
            decoded = text(value).flatMap { Int($0) } as? Value
        } else if type == Double.self {
            decoded = text(value).flatMap { Double($0) } as? Value
        } else {
            do {
                decoded = try JSONDecoder().decode(Value.self, from: Data(value.bytes))
            } catch {
                throw KeychainError(
                    .decodingFailed, "The item \"\(key)\" is not a JSON-encoded \(Value.self)", underlying: error)
            }
        }
        guard let result = decoded else {
            throw KeychainError(.decodingFailed, "The item \"\(key)\" cannot be read as \(Value.self)")
        }
        return result
    }

    private static func text(_ value: ItemValue) -> String? {
        String(validating: value.bytes, as: UTF8.self)
    }
}
