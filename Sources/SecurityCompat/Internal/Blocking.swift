import Dispatch
import Synchronization

/// Runs async work (an authenticator's prompt) from the synchronous SecItem functions: the
/// calling thread waits while the work runs on a serial queue of its own, set as the task's
/// executor preference, so the wait never depends on Swift concurrency's shared threads (which
/// the caller may be occupying).
enum Blocking {
    final class QueueExecutor: TaskExecutor {
        let queue = DispatchQueue(label: "SecurityCompat.blocking")

        func enqueue(_ job: consuming ExecutorJob) {
            let job = UnownedJob(job)
            queue.async { job.runSynchronously(on: self.asUnownedTaskExecutor()) }
        }
    }

    static func run<R: Sendable>(_ body: @escaping @Sendable () async throws(SecStatus) -> R) throws(SecStatus) -> R {
        let outcome = Mutex<Result<R, SecStatus>?>(nil)
        let done = DispatchSemaphore(value: 0)
        let executor = QueueExecutor()
        Task(executorPreference: executor) {
            let result: Result<R, SecStatus>
            do throws(SecStatus) { result = .success(try await body()) } catch { result = .failure(error) }
            outcome.withLock { $0 = result }
            done.signal()
        }
        done.wait()
        // The task has stored its result before signalling.
        return try outcome.withLock { $0! }.get()
    }
}
