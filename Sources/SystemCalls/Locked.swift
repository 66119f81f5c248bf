// Public imports: the inlinable lock below names pthread_mutex_t in its callers' modules, and an
// inlinable body that other modules compile may only name public declarations.
#if canImport(Glibc)
public import Glibc
#elseif canImport(Musl)
public import Musl
#endif

/// A value behind a pthread mutex: the lock every target uses for shared state.
///
/// Why not the standard library's `Synchronization.Mutex`: on Linux it is a futex driven from
/// the (uninstrumented) standard library, so ThreadSanitizer cannot see its synchronisation and
/// reports every access it protects as a race (a two-thread program that only touches a
/// dictionary inside `Mutex.withLock` is reported). pthread mutexes are intercepted by the
/// sanitizer, so `Scripts/tsan.sh` checks this project's locking for real. The cost is two
/// allocations per lock (the mutex, and the value kept behind a pointer) and a few nanoseconds per
/// acquisition.
///
/// Give it a value with a size, even when it guards no state of its own (`Locked<UInt8>`, not
/// `Locked<()>`): a zero-sized value has the address of the memory after it, and ThreadSanitizer
/// then reports the lock's own accesses as races with that neighbour.
///
/// Inlinable, like the standard library's lock, so that each caller gets `withLock` specialised
/// for its value and result: the generic version (value witnesses, metadata lookups per call)
/// made a get half as slow again.
///
/// `public`, not `package`: Swift 6.3 neither inlines nor specialises an `@inlinable` member of a
/// `package` type in another module (in a two-module package the call stays a call to the
/// generic body), while it does for a `public` one. SystemCalls is no product, so no client of
/// this package sees it.
public final class Locked<Value>: @unchecked Sendable {
    @usableFromInline let mutex: UnsafeMutablePointer<pthread_mutex_t>
    /// Behind a pointer rather than a stored `var`: `body(&value)` on a class property made every
    /// acquisition a dynamic exclusivity check (swift_beginAccess), which the mutex makes
    /// redundant; on a get's four acquisitions that was measurable.
    @usableFromInline let storage: UnsafeMutablePointer<Value>

    @inlinable public init(_ value: Value) {
        storage = UnsafeMutablePointer<Value>.allocate(capacity: 1)
        storage.initialize(to: value)
        mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
        mutex.initialize(to: pthread_mutex_t())
        pthread_mutex_init(mutex, nil)
    }

    deinit {
        pthread_mutex_destroy(mutex)
        mutex.deinitialize(count: 1)
        mutex.deallocate()
        storage.deinitialize(count: 1)
        storage.deallocate()
    }

    /// Runs `body` with the value, holding the lock.
    @inlinable public func withLock<R, E: Error>(_ body: (inout Value) throws(E) -> R) throws(E) -> R {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return try body(&storage.pointee)
    }
}
