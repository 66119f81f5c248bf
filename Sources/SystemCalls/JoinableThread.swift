// A pthread that can be joined. Foundation.Thread cannot be joined, and a Dispatch queue's worker
// would be held for as long as a long-running loop runs; owners that close what their thread uses
// (the recording proxy's descriptors, the logind follower's bus) must know it has finished.

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

package struct JoinableThread: Sendable {
    private final class Body {
        let run: @Sendable () -> Void
        init(_ run: @escaping @Sendable () -> Void) { self.run = run }
    }

    private let handle: pthread_t

    /// Starts `body` on a new thread.
    ///
    /// - Throws: `Errno` with pthread_create's error number.
    package init(_ body: @escaping @Sendable () -> Void) throws(Errno) {
        let context = Unmanaged.passRetained(Body(body)).toOpaque()
        var handle = pthread_t()
        let result = pthread_create(
            &handle, nil,
            { raw in
                guard let raw else { return nil }
                Unmanaged<Body>.fromOpaque(raw).takeRetainedValue().run()
                return nil
            }, context)
        guard result == 0 else {
            Unmanaged<Body>.fromOpaque(context).release()
            throw Errno(rawValue: result)
        }
        self.handle = handle
    }

    /// Waits for the thread to finish. Call exactly once, from another thread.
    package func join() {
        _ = pthread_join(handle, nil)
    }
}
