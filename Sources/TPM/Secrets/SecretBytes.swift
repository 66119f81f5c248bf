internal import CTSS2
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// Secret key material that lives in one heap buffer, is kept out of swap where the system
/// allows, compares in constant time and is zeroized when the last reference goes away.
///
/// - Important: the bytes are only reachable through ``withUnsafeBytes(_:)``. Copying them into a
///   `[UInt8]` or `Data` creates a copy this type cannot erase; keep such copies short-lived.
public final class SecretBytes: @unchecked Sendable, Equatable {
    // Immutable after init, so sharing across threads is safe.
    private let storage: UnsafeMutableRawBufferPointer
    private let locked: Bool

    /// The number of secret bytes (the allocation is at least one byte, even for an empty secret).
    public let count: Int

    /// Allocates `count` bytes and lets `initializer` fill them.
    ///
    /// - Throws: whatever `initializer` throws; the buffer is zeroized and freed first.
    public init(count: Int, initializer: (UnsafeMutableRawBufferPointer) throws -> Void) rethrows {
        precondition(count >= 0, "a secret cannot have a negative size")
        self.count = count
        storage = UnsafeMutableRawBufferPointer.allocate(byteCount: max(count, 1), alignment: 16)
        storage.initializeMemory(as: UInt8.self, repeating: 0)
        // Best effort: RLIMIT_MEMLOCK may be small; an unlocked secret is still zeroized.
        locked = mlock(storage.baseAddress, storage.count) == 0
        do {
            try initializer(UnsafeMutableRawBufferPointer(rebasing: storage[0..<count]))
        } catch {
            Self.release(storage, locked: locked)
            throw error
        }
    }

    /// Copies `bytes` into a new secret. The caller remains responsible for its own copy.
    public convenience init(copying bytes: UnsafeRawBufferPointer) {
        self.init(count: bytes.count) { $0.copyMemory(from: bytes) }
    }

    /// Copies `bytes` into a new secret. The caller remains responsible for its own copy.
    public convenience init(copying bytes: [UInt8]) {
        self.init(count: bytes.count) { target in
            bytes.withUnsafeBytes { target.copyMemory(from: $0) }
        }
    }

    /// `count` bytes from the operating system's CSPRNG (`getrandom`).
    ///
    /// - Throws: ``TPMError`` if the kernel cannot supply randomness.
    public static func random(count: Int) throws(TPMError) -> SecretBytes {
        do {
            return try SecretBytes(count: count) { buffer in
                try SystemRandom.fill(buffer)
            }
        } catch let error as TPMError {
            throw error
        } catch {
            throw TPMError(.other, "The system random generator failed: \(error)")
        }
    }

    deinit { Self.release(storage, locked: locked) }

    /// Sees every buffer after it is zeroized and before it is freed: how tests prove zeroization
    /// without reading freed memory.
    static let releaseObserver = Mutex<(@Sendable (UnsafeRawBufferPointer) -> Void)?>(nil)

    private static func release(_ storage: UnsafeMutableRawBufferPointer, locked: Bool) {
        ctss2_secure_zero(storage.baseAddress, storage.count)
        releaseObserver.withLock { observer in observer?(UnsafeRawBufferPointer(storage)) }
        if locked { munlock(storage.baseAddress, storage.count) }
        storage.deallocate()
    }

    /// Runs `body` with read access to the secret. Do not let the pointer escape.
    public func withUnsafeBytes<R, E: Error>(_ body: (UnsafeRawBufferPointer) throws(E) -> R) throws(E) -> R {
        try body(UnsafeRawBufferPointer(rebasing: storage[0..<count]))
    }

    /// Constant-time comparison: the time taken depends on the lengths only.
    public static func == (lhs: SecretBytes, rhs: SecretBytes) -> Bool {
        guard lhs.count == rhs.count else { return false }
        var difference: UInt8 = 0
        for index in 0..<lhs.count {
            difference |= lhs.storage[index] ^ rhs.storage[index]
        }
        return difference == 0
    }
}

/// Zeroizes a buffer the optimizer would otherwise consider dead.
func secureZero(_ buffer: UnsafeMutableRawBufferPointer) {
    ctss2_secure_zero(buffer.baseAddress, buffer.count)
}

/// Zeroizes a C structure in place (sensitive TPM2B inputs on their way to ESAPI).
func secureZero<T>(_ pointer: UnsafeMutablePointer<T>) {
    ctss2_secure_zero(pointer, MemoryLayout<T>.size)
}
