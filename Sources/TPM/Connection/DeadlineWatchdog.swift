import SystemCalls

#if canImport(Glibc)
import Glibc
#endif

/// One thread per process that fires the alarms of TPM work that overran its deadline.
///
/// Arming and disarming take a mutex and touch a small table: no system call, no thread woken.
/// The thread sleeps until the earliest deadline armed when it went to sleep; every later alarm
/// has a later deadline (they all run the same timeout from later), so it is woken only when it
/// was idle with nothing armed. What it wakes for and finds disarmed it forgets. A Dispatch
/// timer per alarm (scheduled on the manager thread, cancelled on the next) cost a first
/// protected get two wake-ups of other threads per TPM round trip.
final class DeadlineWatchdog: @unchecked Sendable { // the mutex guards every var
    static let shared = DeadlineWatchdog()

    private struct Entry {
        let deadline: UInt64
        let fire: @Sendable () -> Void
    }

    private let mutex: UnsafeMutablePointer<pthread_mutex_t>
    private let condition: UnsafeMutablePointer<pthread_cond_t>
    private var entries: [UInt64: Entry] = [:]
    private var nextToken: UInt64 = 0
    private var thread: JoinableThread?
    /// The deadline the thread sleeps until; nil while it waits with nothing armed.
    private var sleepingUntil: UInt64?

    private init() {
        mutex = .allocate(capacity: 1)
        mutex.initialize(to: pthread_mutex_t())
        pthread_mutex_init(mutex, nil)
        condition = .allocate(capacity: 1)
        condition.initialize(to: pthread_cond_t())
        var attributes = pthread_condattr_t()
        pthread_condattr_init(&attributes)
        pthread_condattr_setclock(&attributes, CLOCK_MONOTONIC)
        pthread_cond_init(condition, &attributes)
        pthread_condattr_destroy(&attributes)
    }

    /// Calls `fire` on the watchdog's thread once `timeout` has passed, unless ``cancel(_:)``
    /// comes first. - Returns: the token that cancels it; nil when no thread could be started
    /// (then nothing fires, and the work is unbounded as it would be without a deadline).
    func schedule(after timeout: Duration, _ fire: @escaping @Sendable () -> Void) -> UInt64? {
        let deadline = Self.now() &+ UInt64(max(timeout, .zero) / .nanoseconds(1))
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        if thread == nil {
            thread = try? JoinableThread { [self] in watch() }
            guard thread != nil else { return nil }
        }
        let token = nextToken
        nextToken &+= 1
        entries[token] = Entry(deadline: deadline, fire: fire)
        if sleepingUntil.map({ deadline < $0 }) ?? true { pthread_cond_signal(condition) }
        return token
    }

    func cancel(_ token: UInt64) {
        pthread_mutex_lock(mutex)
        entries.removeValue(forKey: token)
        pthread_mutex_unlock(mutex)
    }

    private func watch() {
        pthread_mutex_lock(mutex)
        while true {
            let now = Self.now()
            let due = entries.filter { $0.value.deadline <= now }
            for (token, entry) in due {
                entries.removeValue(forKey: token)
                pthread_mutex_unlock(mutex)
                entry.fire()
                pthread_mutex_lock(mutex)
            }
            if !due.isEmpty { continue }
            if let earliest = entries.values.map(\.deadline).min() {
                sleepingUntil = earliest
                var until = timespec(tv_sec: Int(earliest / 1_000_000_000), tv_nsec: Int(earliest % 1_000_000_000))
                _ = pthread_cond_timedwait(condition, mutex, &until)
            } else {
                sleepingUntil = nil
                pthread_cond_wait(condition, mutex)
            }
        }
    }

    /// CLOCK_MONOTONIC in nanoseconds, the clock the condition waits on.
    private static func now() -> UInt64 {
        var time = timespec()
        clock_gettime(CLOCK_MONOTONIC, &time)
        return UInt64(time.tv_sec) * 1_000_000_000 + UInt64(time.tv_nsec)
    }
}
