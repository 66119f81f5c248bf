import Crypto
import CryptoExtras
import FoundationEssentials
import Secrets

/// libsecret's own keyring file, the one a sandboxed application keeps its items in once the
/// Secret portal gives it its secret (`$XDG_DATA_HOME/keyrings/default.keyring` in the sandbox,
/// `~/.var/app/ID/data/keyrings/default.keyring` outside): read and written here so that an
/// application's existing Secret Service items can be moved into it (``PortalMove``).
///
/// The format (libsecret 0.20, secret-file-collection.c; docs/FORMAT.md, "Portal keyring
/// files"): the 16 bytes `GnomeKeyring\n\r\0\n`, the version bytes 1 and 0, then a GVariant
/// `(uayutua(a{say}ay))`: salt length, salt, PBKDF2 iterations, modified time, usage count and
/// the items. The key is PBKDF2-HMAC-SHA256 of the application's secret, 16 bytes; it is both
/// the AES-128-CBC key and the HMAC-SHA256 key. An item is its attributes' names in clear, each
/// with the HMAC of its value, and `ciphertext ‖ IV ‖ HMAC(ciphertext ‖ IV)` of the
/// PKCS#7-padded GVariant `(a{ss}sttay)`: attributes, label, created, modified, secret.
struct PortalKeyring {
    struct Item: Equatable {
        var attributes: [String: String]
        var label: String
        var created: UInt64
        var modified: UInt64
        var secret: [UInt8]
    }

    struct Failure: Error, CustomStringConvertible {
        let description: String
    }

    static let header = Array("GnomeKeyring\n\r\0\n".utf8) + [1, 0]
    static let fileType = GVariantType.tuple([
        .uint32, .array(.byte), .uint32, .uint64, .uint32, .array(sealedItemType),
    ])
    static let sealedItemType = GVariantType.tuple([.array(.dictionaryEntry(.string, .array(.byte))), .array(.byte)])
    static let itemType = GVariantType.tuple([
        .array(.dictionaryEntry(.string, .string)), .string, .uint64, .uint64, .array(.byte),
    ])
    /// libsecret's choices for a new file.
    static let newSaltSize = 32
    static let newIterations: UInt32 = 100_000
    /// More iterations than any libsecret writes: a file asking for them is not its.
    static let iterationLimit: UInt32 = 10_000_000

    private(set) var salt: [UInt8]
    private(set) var iterations: UInt32
    private(set) var usageCount: UInt32
    /// The items as sealed: hashed attributes and the encrypted blob, each kept as read.
    private var sealed: [GVariant]
    private let key: SymmetricKey

    /// The keyring `contents` (nil: a new, empty one), with its key derived from `secret`.
    ///
    /// - Throws: ``Failure`` for a file that is not a libsecret keyring, or whose items were not
    ///   sealed with `secret` (another application's, or another machine's).
    init(contents: [UInt8]?, secret: SecretBytes) throws(Failure) {
        guard let contents else {
            salt = SystemRandom.bytes(Self.newSaltSize)
            iterations = Self.newIterations
            usageCount = 0
            sealed = []
            key = try Self.deriveKey(secret, salt: salt, iterations: iterations)
            return
        }
        guard contents.count > Self.header.count, Array(contents.prefix(Self.header.count)) == Self.header else {
            throw Failure(description: "not a libsecret keyring file of version 1.0")
        }
        let fields: [GVariant]
        do {
            fields = try GVariant(contents[Self.header.count...], as: Self.fileType).elements ?? []
        } catch {
            throw Failure(description: "a damaged libsecret keyring file: \(error)")
        }
        guard fields.count == 6, let saltSize = fields[0].uint32Value, let salt = fields[1].bytesValue,
            Int(saltSize) == salt.count, let iterations = fields[2].uint32Value, let usage = fields[4].uint32Value,
            let items = fields[5].elements
        else { throw Failure(description: "a damaged libsecret keyring file: its header fields") }
        guard iterations > 0, iterations <= Self.iterationLimit else {
            throw Failure(description: "a libsecret keyring file asking for \(iterations) PBKDF2 iterations")
        }
        self.salt = salt
        self.iterations = iterations
        usageCount = usage
        sealed = items
        key = try Self.deriveKey(secret, salt: salt, iterations: iterations)
        // Every item must open with this key: merging into a file sealed with another secret
        // would leave the application a keyring it cannot read whole.
        for item in items { _ = try open(item) }
    }

    /// The items, decrypted.
    func items() throws(Failure) -> [Item] {
        var result: [Item] = []
        for item in sealed { result.append(try open(item)) }
        return result
    }

    /// Adds `item`, replacing the one with exactly the same attributes (keeping its creation
    /// time), as libsecret's own store does.
    mutating func replace(with item: Item) throws(Failure) {
        let hashed = hashedAttributes(item.attributes)
        var item = item
        var kept: [GVariant] = []
        for existing in sealed {
            if existing.elements?.first == hashed {
                item.created = try open(existing).created
            } else {
                kept.append(existing)
            }
        }
        kept.append(.tuple([hashed, .bytes(try seal(item))]))
        sealed = kept
        usageCount &+= 1
    }

    /// The file's bytes, its modification time `now`.
    func serialized(now: UInt64) throws(Failure) -> [UInt8] {
        let file = GVariant.tuple([
            .uint32(UInt32(salt.count)), .bytes(salt), .uint32(iterations), .uint64(now), .uint32(usageCount),
            .array(sealed),
        ])
        do {
            return Self.header + (try file.serialized(as: Self.fileType))
        } catch {
            throw Failure(description: "the keyring could not be serialized: \(error)")
        }
    }

    // MARK: Sealing

    private static func deriveKey(
        _ secret: SecretBytes, salt: [UInt8], iterations: UInt32
    ) throws(Failure)
        -> SymmetricKey
    {
        do {
            return try secret.withUnsafeBytes { password in
                try KDF.Insecure.PBKDF2.deriveKey(
                    from: password, salt: salt, using: .sha256, outputByteCount: 16,
                    unsafeUncheckedRounds: Int(iterations))
            }
        } catch {
            throw Failure(description: "PBKDF2 failed: \(error)")
        }
    }

    private func mac(_ bytes: some DataProtocol) -> [UInt8] {
        Array(HMAC<SHA256>.authenticationCode(for: bytes, using: key))
    }

    /// `a{say}`: each attribute's name, sorted bytewise as g_strcmp0 sorts, with its value's HMAC.
    private func hashedAttributes(_ attributes: [String: String]) -> GVariant {
        .array(
            attributes.sorted { Array($0.key.utf8).lexicographicallyPrecedes(Array($1.key.utf8)) }.map {
                .dictionaryEntry(.string($0.key), .bytes(mac(Array($0.value.utf8))))
            })
    }

    private func seal(_ item: Item) throws(Failure) -> [UInt8] {
        let plain = GVariant.tuple([
            .array(
                item.attributes.sorted { $0.key < $1.key }.map { .dictionaryEntry(.string($0.key), .string($0.value)) }),
            .string(item.label), .uint64(item.created), .uint64(item.modified), .bytes(item.secret),
        ])
        var serialized: [UInt8]
        do {
            serialized = try plain.serialized(as: Self.itemType)
        } catch {
            throw Failure(description: "an item could not be serialized: \(error)")
        }
        defer { serialized.withUnsafeMutableBytes { secureZero($0) } }
        do {
            let iv = AES._CBC.IV()
            // AES._CBC pads with PKCS#7, as libsecret does.
            let ciphertext = Array(try AES._CBC.encrypt(serialized, using: key, iv: iv))
            let body = ciphertext + Array(iv)
            return body + mac(body)
        } catch {
            throw Failure(description: "an item could not be encrypted: \(error)")
        }
    }

    private func open(_ sealedItem: GVariant) throws(Failure) -> Item {
        guard let parts = sealedItem.elements, parts.count == 2, let blob = parts[1].bytesValue,
            blob.count >= 16 + 32 + 16, (blob.count - 48) % 16 == 0
        else { throw Failure(description: "a damaged item in the keyring file") }
        let body = blob.dropLast(32)
        guard Array(mac(body)) == Array(blob.suffix(32)) else {
            throw Failure(
                description: "the keyring file's items were not sealed with this application's portal secret")
        }
        var plain: [UInt8]
        do {
            let iv = try AES._CBC.IV(ivBytes: body.suffix(16))
            plain = Array(try AES._CBC.decrypt(body.dropLast(16), using: key, iv: iv))
        } catch {
            throw Failure(description: "an item of the keyring file could not be decrypted: \(error)")
        }
        defer { plain.withUnsafeMutableBytes { secureZero($0) } }
        let fields: [GVariant]
        do {
            fields = try GVariant(plain[...], as: Self.itemType).elements ?? []
        } catch {
            throw Failure(description: "a damaged item in the keyring file: \(error)")
        }
        guard fields.count == 5, let attributes = fields[0].elements, let label = fields[1].stringValue,
            let created = fields[2].uint64Value, let modified = fields[3].uint64Value, let secret = fields[4].bytesValue
        else { throw Failure(description: "a damaged item in the keyring file") }
        var pairs: [String: String] = [:]
        for attribute in attributes {
            guard case .dictionaryEntry(.string(let name), .string(let value)) = attribute else {
                throw Failure(description: "a damaged attribute in the keyring file")
            }
            pairs[name] = value
        }
        // libsecret finds items by the names and hashes in clear, which its MAC does not cover:
        // they must be those of the attributes sealed inside.
        guard parts[0] == hashedAttributes(pairs) else {
            throw Failure(description: "an item's attribute index does not match its sealed attributes")
        }
        return Item(attributes: pairs, label: label, created: created, modified: modified, secret: secret)
    }
}
