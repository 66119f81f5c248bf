internal import CSystemCalls
public import SystemCalls

#if canImport(Glibc)
import Glibc
#endif

/// Secret key material that lives in its own pages, is kept out of swap and out of core dumps
/// where the system allows, compares in constant time and is zeroized when the last reference
/// goes away.
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
        // Whole pages, so MADV_DONTDUMP covers the secret and nothing else shares them.
        let page = SecretMemory.pageSize
        let byteCount = (max(count, 1) + page - 1) / page * page
        if byteCount == page, let kept = LockedPages.take() {
            storage = kept
            locked = true
        } else {
            storage = UnsafeMutableRawBufferPointer.allocate(byteCount: byteCount, alignment: page)
            storage.initializeMemory(as: UInt8.self, repeating: 0)
            // Best effort: RLIMIT_MEMLOCK may be small; an unlocked secret is still zeroized.
            locked = mlock(storage.baseAddress, storage.count) == 0
            _ = tk_exclude_from_core_dumps(storage.baseAddress, storage.count)
        }
        do {
            try initializer(UnsafeMutableRawBufferPointer(rebasing: storage[0..<count]))
        } catch {
            Self.release(storage, count: count, locked: locked)
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
    /// - Throws: `Errno` if the kernel cannot supply randomness.
    public static func random(count: Int) throws(Errno) -> SecretBytes {
        do {
            return try SecretBytes(count: count) { buffer in
                try SystemRandom.fill(buffer)
            }
        } catch let error as Errno {
            throw error
        } catch {
            throw Errno(rawValue: EIO)
        }
    }

    deinit { Self.release(storage, count: count, locked: locked) }

    /// Sees every secret's bytes after they are zeroized and before they are freed: how tests
    /// prove zeroization without reading freed memory.
    package static let releaseObserver = Locked<(@Sendable (UnsafeRawBufferPointer) -> Void)?>(nil)

    private static func release(_ storage: UnsafeMutableRawBufferPointer, count: Int, locked: Bool) {
        tk_secure_zero(storage.baseAddress, storage.count)
        releaseObserver.withLock { observer in observer?(UnsafeRawBufferPointer(rebasing: storage[0..<count])) }
        if locked && storage.count == SecretMemory.pageSize && LockedPages.keep(storage) { return }
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

/// Pages that held a secret, zeroized, still locked and left out of core dumps, kept for the next
/// one: an mlock and an munlock are a system call and a page-table walk each, and a protected
/// get makes three secrets (3 % of its CPU time, in `TPMBenchmarks access-first`). At most ``limit`` are
/// kept, so a process that once held many secrets gives their pages back.
enum LockedPages {
    static let limit = 16
    private static let kept = Locked<[UnsafeMutableRawBufferPointer]>([])

    /// A kept page, all zeros, or nil when none is kept.
    static func take() -> UnsafeMutableRawBufferPointer? {
        kept.withLock { $0.popLast() }
    }

    /// Keeps `page` (one page, zeroized, locked) for the next secret; false when enough are kept.
    static func keep(_ page: UnsafeMutableRawBufferPointer) -> Bool {
        kept.withLock { pages in
            guard pages.count < limit else { return false }
            pages.append(page)
            return true
        }
    }
}

/// Process-wide protection of secrets in memory.
public enum SecretMemory {
    package static let pageSize = max(Int(sysconf(Int32(_SC_PAGESIZE))), 4096)

    /// Stops this process from ever writing a core dump: decrypted keychain values pass through
    /// ordinary memory (Swift strings, Data) that no library can erase, and a crash would write
    /// them to disk. Sets RLIMIT_CORE to 0 and marks the process not dumpable (which also stops
    /// systemd-coredump and ptrace by other processes of the same user). Call it early in
    /// programs that read secrets; `tpm-keychain` does. ``SecretBytes`` are left out of dumps
    /// regardless (MADV_DONTDUMP).
    ///
    /// - Returns: false when the kernel refused either setting.
    @discardableResult
    public static func disableCoreDumps() -> Bool {
        tk_disable_core_dumps() == 0
    }
}

/// Zeroizes a buffer the optimizer would otherwise consider dead.
package func secureZero(_ buffer: UnsafeMutableRawBufferPointer) {
    tk_secure_zero(buffer.baseAddress, buffer.count)
}

/// Zeroizes a C structure in place (sensitive TPM2B inputs on their way to ESAPI).
package func secureZero<T>(_ pointer: UnsafeMutablePointer<T>) {
    tk_secure_zero(pointer, MemoryLayout<T>.size)
}

/// Zeroizes `count` bytes at `pointer` (C buffers ESAPI hands back).
package func secureZero(_ pointer: UnsafeMutableRawPointer?, count: Int) {
    tk_secure_zero(pointer, count)
}
