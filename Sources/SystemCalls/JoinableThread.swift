// A pthread that can be joined. Foundation.Thread cannot be joined, and a Dispatch queue's worker
// would be held for as long as a long-running loop runs; owners that close what their thread uses
// (the recording proxy's descriptors, the logind follower's bus) must know it has finished.

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// What a new thread runs, passed through pthread_create's context pointer.
private final class ThreadBody {
    let run: @Sendable () -> Void
    init(_ run: @escaping @Sendable () -> Void) { self.run = run }

    /// Starts `body` on a new thread made with `attributes` (nil: joinable).
    static func start(
        _ body: @escaping @Sendable () -> Void, attributes: UnsafePointer<pthread_attr_t>?
    ) throws(Errno) -> pthread_t {
        let context = Unmanaged.passRetained(ThreadBody(body)).toOpaque()
        var handle = pthread_t()
        let result = pthread_create(
            &handle, attributes,
            { raw in
                guard let raw else { return nil }
                Unmanaged<ThreadBody>.fromOpaque(raw).takeRetainedValue().run()
                return nil
            }, context)
        guard result == 0 else {
            Unmanaged<ThreadBody>.fromOpaque(context).release()
            throw Errno(rawValue: result)
        }
        return handle
    }
}

package struct JoinableThread: Sendable {
    private let handle: pthread_t

    /// Starts `body` on a new thread.
    ///
    /// - Throws: `Errno` with pthread_create's error number.
    package init(_ body: @escaping @Sendable () -> Void) throws(Errno) {
        handle = try ThreadBody.start(body, attributes: nil)
    }

    /// Waits for the thread to finish. Call exactly once, from another thread.
    package func join() {
        _ = pthread_join(handle, nil)
    }
}

/// A pthread nobody joins: it frees itself when its body returns. For a wait whose end no owner
/// needs to see, only its result (a person answering a prompt command).
package enum DetachedThread {
    /// Starts `body` on a new detached thread.
    ///
    /// - Throws: `Errno` with pthread_create's error number.
    package static func start(_ body: @escaping @Sendable () -> Void) throws(Errno) {
        var attributes = pthread_attr_t()
        pthread_attr_init(&attributes)
        defer { pthread_attr_destroy(&attributes) }
        pthread_attr_setdetachstate(&attributes, Int32(PTHREAD_CREATE_DETACHED))
        _ = try ThreadBody.start(body, attributes: &attributes)
    }
}
