import Crypto
import Foundation
import KeychainVocabulary
import SystemCalls
import Testing

@testable import KeychainStore

/// The store's caches, each the owner of its lock (`Caches/`, `Files/LockPool.swift`): bounded,
/// emptied on demand, and never answering for bytes other than the ones they came from.
@Suite struct CacheTests {
    static func identity(_ index: Int) -> ItemIdentity {
        ItemIdentity(unchecked: "", "svc", "account-\(index)")
    }

    static func names(_ index: Int) -> ItemStore.ItemNames {
        ItemStore.ItemNames(version: 2, group: "g", file: "f\(index)", encodedIdentity: [UInt8(index & 0xFF)])
    }

    @Test("the name cache keeps at most its limit of names, and forgets them all on demand")
    func nameCacheIsBounded() {
        let cache = ItemNameCache()
        for index in 0..<ItemStore.cacheLimit { cache.remember(Self.names(index), of: Self.identity(index)) }
        #expect(cache.names(of: Self.identity(0))?.file == "f0")
        #expect(cache.names(of: Self.identity(ItemStore.cacheLimit - 1))?.file == "f\(ItemStore.cacheLimit - 1)")
        // One more starts again: the cache never holds more than its limit.
        cache.remember(Self.names(ItemStore.cacheLimit), of: Self.identity(ItemStore.cacheLimit))
        #expect(cache.names(of: Self.identity(0)) == nil)
        #expect(cache.names(of: Self.identity(ItemStore.cacheLimit))?.file == "f\(ItemStore.cacheLimit)")
        cache.remember((group: "g", file: "p"), ofPrimaryKey: [1, 2, 3])
        #expect(cache.names(ofPrimaryKey: [1, 2, 3])?.file == "p")
        cache.removeAll()
        #expect(cache.names(of: Self.identity(ItemStore.cacheLimit)) == nil)
        #expect(cache.names(ofPrimaryKey: [1, 2, 3]) == nil)
    }

    @Test("what a write sealed answers only for exactly its header and sealed bytes")
    func writtenAnswersOnlyForItsBytes() {
        let cache = DecryptionCache()
        let header = [UInt8](repeating: 0xAB, count: 124)
        let sealed = [UInt8](repeating: 0xCD, count: 40)
        var attributes = AttributeList()
        attributes.setString("label", for: AttributeTag.label)
        cache.rememberWritten(
            ListedWrite(header: header, sealed: sealed[...], attributes: attributes, file: "x"), file: "x")
        let written = cache.written("x")
        #expect(written?.holds(header: header, sealed: sealed[...]) == true)
        for index in [0, 123] {
            var other = header
            other[index] ^= 1
            #expect(written?.holds(header: other, sealed: sealed[...]) == false, "header byte \(index)")
        }
        for index in [0, 39] {
            var other = sealed
            other[index] ^= 1
            #expect(written?.holds(header: header, sealed: other[...]) == false, "sealed byte \(index)")
        }
        #expect(written?.holds(header: header, sealed: sealed.dropLast()) == false)
    }

    @Test("what writes sealed is kept for the last items written only; an item written again keeps its place")
    func writtenIsBounded() {
        let cache = DecryptionCache()
        func write(_ file: String) {
            cache.rememberWritten(
                ListedWrite(header: [1], sealed: [2][...], attributes: AttributeList(), file: file), file: file)
        }
        for index in 0..<ItemStore.writtenLimit { write("f\(index)") }
        write("f0")
        #expect(cache.written("f0") != nil, "rewriting a kept item does not start the cache again")
        write("new")
        #expect(cache.written("new") != nil)
        #expect(cache.written("f1") == nil, "one item more than the limit starts again")
    }

    @Test("an item key is derived once per salt, until the cache is emptied")
    func itemKeysAreDerivedOnce() {
        let cache = DecryptionCache()
        let salt = WriteSalt([UInt8](repeating: 7, count: 32)[...])
        var derivations = 0
        let derive = {
            derivations += 1
            return SymmetricKey(size: .bits256)
        }
        let first = cache.itemKey(salt, derive: derive)
        let second = cache.itemKey(salt, derive: derive)
        #expect(derivations == 1)
        #expect(first == second)
        cache.removeAll()
        _ = cache.itemKey(salt, derive: derive)
        #expect(derivations == 2)
    }

    @Test("a lock file is lent to one holder at a time, and dropped when its directory was opened again")
    func lockPoolLendsOnce() throws {
        let path = NSTemporaryDirectory() + "lock-pool-" + UUID().uuidString
        defer { try? FileManager.default.removeItem(atPath: path) }
        let directory = try #require(try Directory.open(path, in: nil, create: true))
        let pool = LockPool()
        #expect(pool.lend("g", in: directory) == nil, "nothing kept yet: the caller opens one")
        let file = try directory.openLock(".lock")
        pool.giveBack(file, "g", in: directory)
        #expect(pool.lend("g", in: directory) === file)
        #expect(pool.lend("g", in: directory) == nil, "lent already: a second holder opens its own")
        pool.giveBack(file, "g", in: directory)
        let reopened = try #require(try Directory.open(path, in: nil, create: false))
        #expect(pool.lend("g", in: reopened) == nil, "a file of the old directory object is not lent for the new one")
        #expect(pool.lend("g", in: directory) == nil, "and it was dropped")
    }
}
