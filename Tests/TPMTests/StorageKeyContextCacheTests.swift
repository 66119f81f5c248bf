import SystemCalls
import TPMKeychainTesting
import Testing

@testable import TPM

/// A cache in memory, counting what the connection does with it.
final class MemoryContextCache: StorageKeyContextCache {
    let stored = Locked<[UInt8]?>(nil)
    let saves = Locked(0)

    func loadStorageKeyContext() -> [UInt8]? { stored.withLock { $0 } }
    func saveStorageKeyContext(_ context: [UInt8]) {
        stored.withLock { $0 = context }
        saves.withLock { $0 += 1 }
    }
}

@Suite struct StorageKeyContextCacheTests {
    static let createPrimary: UInt32 = 0x131
    static let contextLoad: UInt32 = 0x161

    @Test("A saved storage-key context replaces CreatePrimary in later connections")
    func contextIsUsed() throws {
        try withSimulator { simulator, configuration in
            let cache = MemoryContextCache()
            let (key, sealed) = try withCachedConnection(configuration, cache) { try $0.generateSealedKey() }
            #expect(cache.saves.withLock { $0 } == 1)
            let proxy = try RecordingTPMProxy.start(forwardingTo: simulator.port)
            defer { proxy.stop() }
            let unsealed = try withCachedConnection(TPMConfiguration(tcti: proxy.tcti), cache) { try $0.unseal(sealed) }
            #expect(unsealed == key)
            #expect(proxy.commandCodes.contains(Self.contextLoad))
            #expect(!proxy.commandCodes.contains(Self.createPrimary))
            #expect(try listedHandles("transient", simulator).isEmpty, "the loaded key is flushed at close")
        }
    }

    @Test("After a TPM reboot the stale context is refused, the key derived again and the cache renewed")
    func staleContextAfterReboot() throws {
        try withSimulator { simulator, configuration in
            let cache = MemoryContextCache()
            let (key, sealed) = try withCachedConnection(configuration, cache) { try $0.generateSealedKey() }
            let before = cache.stored.withLock { $0 }
            try simulator.powerCycle()
            #expect(try withCachedConnection(configuration, cache) { try $0.unseal(sealed) } == key)
            #expect(cache.saves.withLock { $0 } == 2)
            #expect(cache.stored.withLock { $0 } != before)
        }
    }

    @Test("A damaged context, or one of another TPM's key, is never used: the key is derived and checked")
    func damagedOrForeignContexts() throws {
        try withSimulator { _, configuration in
            try withSimulator { _, otherConfiguration in
                let cache = MemoryContextCache()
                let (key, sealed) = try withCachedConnection(configuration, cache) { try $0.generateSealedKey() }
                var damaged = try #require(cache.stored.withLock { $0 })
                damaged[damaged.count / 2] ^= 0xFF
                cache.stored.withLock { $0 = damaged }
                #expect(try withCachedConnection(configuration, cache) { try $0.unseal(sealed) } == key)

                // Another TPM's storage-key context: loads there, but its name is not the pinned one.
                let foreign = MemoryContextCache()
                _ = try withCachedConnection(otherConfiguration, foreign) { try $0.generateSealedKey() }
                cache.stored.withLock { $0 = foreign.stored.withLock { $0 } }
                #expect(try withCachedConnection(configuration, cache) { try $0.unseal(sealed) } == key)
                try withCachedConnection(otherConfiguration, cache) { tpm in
                    expectTPMError(.wrongStorageKey) { _ = try tpm.unseal(sealed) }
                }
            }
        }
    }
}

/// Opens a connection with `cache`, runs `body`, closes it.
func withCachedConnection<R>(
    _ configuration: TPMConfiguration, _ cache: MemoryContextCache,
    _ body: (TPMConnection) throws -> R
) throws -> R {
    let connection = try TPMConnection(configuration, storageKeyContextCache: cache)
    defer { connection.close() }
    return try body(connection)
}
