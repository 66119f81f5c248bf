import Dispatch
import SystemCalls

/// Runs async work (an authenticator's prompt) for a synchronous caller: SecItem calls, LAContext's
/// synchronous members, the CLI's commands. The caller's thread waits while the work runs on a
/// serial queue of its own, set as the task's executor preference, so the wait never depends on
/// Swift concurrency's shared threads (which the caller may be occupying).
package enum SynchronousWait {
    final class QueueExecutor: TaskExecutor {
        let queue = DispatchQueue(label: "TPMKeychain.synchronous-wait")

        func enqueue(_ job: consuming ExecutorJob) {
            let job = UnownedJob(job)
            queue.async { job.runSynchronously(on: self.asUnownedTaskExecutor()) }
        }
    }

    /// `body`'s result, once it has finished.
    package static func run<R: Sendable>(_ body: @escaping @Sendable () async -> R) -> R {
        let outcome = Locked<R?>(nil)
        let done = DispatchSemaphore(value: 0)
        Task(executorPreference: QueueExecutor()) {
            let value = await body()
            outcome.withLock { $0 = value }
            done.signal()
        }
        done.wait()
        // The task stored its value before signalling.
        return outcome.withLock { $0! }
    }

    /// `body`'s result or error, once it has finished: for a thread of its own (a connection's)
    /// that waits on work which may wait on a person.
    package static func run<R: Sendable, E: Error>(
        _ body: @escaping @Sendable () async throws(E) -> R
    ) throws(E) -> R {
        try run { () async -> Result<R, E> in
            do throws(E) { return .success(try await body()) } catch { return .failure(error) }
        }.get()
    }
}
