#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// A value behind a pthread mutex: the lock every target uses for shared state.
///
/// Why not the standard library's `Synchronization.Mutex`: on Linux it is a futex driven from
/// the (uninstrumented) standard library, so ThreadSanitizer cannot see its synchronisation and
/// reports every access it protects as a race (a two-thread program that only touches a
/// dictionary inside `Mutex.withLock` is reported). pthread mutexes are intercepted by the
/// sanitizer, so `Scripts/tsan.sh` checks this project's locking for real. The cost is one
/// allocation per lock and a few nanoseconds per acquisition.
package final class Locked<Value>: @unchecked Sendable {
    private let mutex: UnsafeMutablePointer<pthread_mutex_t>
    private var value: Value

    package init(_ value: Value) {
        self.value = value
        mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
        mutex.initialize(to: pthread_mutex_t())
        pthread_mutex_init(mutex, nil)
    }

    deinit {
        pthread_mutex_destroy(mutex)
        mutex.deinitialize(count: 1)
        mutex.deallocate()
    }

    /// Runs `body` with the value, holding the lock.
    package func withLock<R, E: Error>(_ body: (inout Value) throws(E) -> R) throws(E) -> R {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return try body(&value)
    }
}
