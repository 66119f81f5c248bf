import Crypto
import Testing

@testable import KeychainStore

/// The manifest's record MAC and the store's names, computed over SHA-256 states keyed once
/// (PreparedHMAC, Manifest.RecordMAC), are
/// HMAC-SHA256 truncated to 16 bytes, as docs/FORMAT.md says and as every manifest already on
/// disk was written: checked against swift-crypto's HMAC for keys shorter than, equal to and
/// longer than SHA-256's block.
@Suite struct ManifestMACTests {
    @Test("RecordMAC equals swift-crypto's HMAC-SHA256, first 16 bytes, for every key length and input")
    func equalsHMAC() {
        var generator = SystemRandomNumberGenerator()
        for keySize in [16, 32, 63, 64, 65, 100] {
            let key = SymmetricKey(data: (0..<keySize).map { _ in UInt8.random(in: 0...255, using: &generator) })
            let recordMAC = Manifest.RecordMAC(key: key)
            for bodySize in [0, 1, 48, 64, 200] {
                let previous = (0..<16).map { _ in UInt8.random(in: 0...255, using: &generator) }
                let body = (0..<bodySize).map { _ in UInt8.random(in: 0...255, using: &generator) }
                var hmac = HMAC<SHA256>(key: key)
                hmac.update(data: previous)
                hmac.update(data: body)
                let expected = Array(Array(hmac.finalize()).prefix(16))
                #expect(recordMAC.mac(body[...], after: previous) == expected, "key \(keySize), body \(bodySize)")
                #expect(Manifest.mac(body, after: previous, key: key) == expected)
                // Used again: the keyed states are copied, never consumed.
                #expect(recordMAC.mac(body[...], after: previous) == expected)
                let prepared = PreparedHMAC(key: key)
                #expect(Array(prepared.authenticationCode(previous[...], body[...])) == Array(hmac.finalize()))
            }
        }
    }

    @Test(
        "A store's keys and item keys are the bytes FORMAT.md gives: HKDF-SHA256 of the master key, as swift-crypto derives them"
    )
    func storeKeysAreRFC5869() {
        var generator = SystemRandomNumberGenerator()
        let master = SymmetricKey(data: (0..<32).map { _ in UInt8.random(in: 0...255, using: &generator) })
        let storeID = (0..<16).map { _ in UInt8.random(in: 0...255, using: &generator) }
        let keys = StoreKeys(masterKey: master, storeID: storeID)
        func hkdf(_ key: SymmetricKey, salt: [UInt8], _ info: [UInt8]) -> SymmetricKey {
            HKDF<SHA256>.deriveKey(inputKeyMaterial: key, salt: salt, info: info, outputByteCount: 32)
        }
        #expect(keys.items == hkdf(master, salt: storeID, StoreKeys.itemsInfo))
        #expect(keys.names == hkdf(master, salt: storeID, StoreKeys.namesInfo))
        #expect(keys.metadata == hkdf(master, salt: [], StoreKeys.metadataInfo))
        #expect(keys.manifest == hkdf(master, salt: storeID, StoreKeys.manifestInfo))
        #expect(keys.counterAuthorization == hkdf(master, salt: storeID, StoreKeys.counterInfo))
        let salt = (0..<32).map { _ in UInt8.random(in: 0...255, using: &generator) }
        #expect(
            keys.itemKey(salt: salt, storeID: storeID) == hkdf(keys.items, salt: salt, StoreKeys.itemKeyInfo + storeID))
    }

    @Test("OneBlockHKDF equals swift-crypto's HKDF-SHA256 of 32 bytes, and raw-keyed PreparedHMAC its HMAC")
    func oneBlockHKDF() {
        var generator = SystemRandomNumberGenerator()
        func random(_ count: Int) -> [UInt8] { (0..<count).map { _ in UInt8.random(in: 0...255, using: &generator) } }
        for (keySize, saltSize, infoSizes) in [
            (32, 32, [19, 16, 16]), (16, 0, [0]), (64, 65, [100, 1]), (33, 64, []),
        ] {
            let key = SymmetricKey(data: random(keySize))
            let salt = random(saltSize)
            let info = infoSizes.map { random($0) }
            let expected = HKDF<SHA256>.deriveKey(
                inputKeyMaterial: key, salt: salt, info: info.flatMap { $0 }, outputByteCount: 32)
            let derived: SymmetricKey
            switch info.count {
            case 0: derived = OneBlockHKDF.deriveKey(inputKeyMaterial: key, salt: salt[...])
            case 1: derived = OneBlockHKDF.deriveKey(inputKeyMaterial: key, salt: salt[...], info: info[0][...])
            case 2:
                derived = OneBlockHKDF.deriveKey(
                    inputKeyMaterial: key, salt: salt[...], info: info[0][...], info[1][...])
            default:
                derived = OneBlockHKDF.deriveKey(
                    inputKeyMaterial: key, salt: salt[...], info: info[0][...], info[1][...], info[2][...])
            }
            #expect(derived == expected, "key \(keySize), salt \(saltSize), info \(infoSizes)")
            // From raw key material, as the device and key records derive theirs.
            let raw = key.withUnsafeBytes { bytes in
                OneBlockHKDF.deriveKey(inputKeyMaterial: bytes, salt: salt[...], info: info.flatMap { $0 }[...])
            }
            #expect(raw == expected)
            if saltSize == 0 {
                // No salt at all, as swift-crypto's HKDF without one: RFC 5869's zero salt.
                let unsalted = HKDF<SHA256>.deriveKey(
                    inputKeyMaterial: key, info: info.flatMap { $0 }, outputByteCount: 32)
                #expect(OneBlockHKDF.deriveKey(inputKeyMaterial: key, info: info.flatMap { $0 }[...]) == unsalted)
            }
            let rawKeyed = salt.withUnsafeBytes { PreparedHMAC(keyBytes: $0) }
            let message = random(70)
            #expect(
                Array(rawKeyed.authenticationCode(message[...]))
                    == Array(HMAC<SHA256>.authenticationCode(for: message, using: SymmetricKey(data: salt))))
        }
    }

    @Test("the contiguous constant-time comparison agrees with the generic one")
    func comparison() {
        let a: [UInt8] = Array(0..<16)
        let container: [UInt8] = [9, 9] + Array(0..<16) + [9]
        #expect(constantTimeEqual(a, container[2..<18]))
        #expect(!constantTimeEqual(a, container[1..<17]))
        #expect(!constantTimeEqual(a, container[2..<17]))
        #expect(constantTimeEqual(a, container[2..<18]) == constantTimeEqual(a[...], container[2..<18]))
    }
}
