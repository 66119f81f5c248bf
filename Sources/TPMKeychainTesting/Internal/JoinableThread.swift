// A pthread that can be joined. Foundation.Thread cannot be joined, and the proxy's stop() must
// know that every forwarding thread has finished before it closes the descriptors they use.

import SystemCalls
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

struct JoinableThread: Sendable {
    private final class Body {
        let run: @Sendable () -> Void
        init(_ run: @escaping @Sendable () -> Void) { self.run = run }
    }

    private let handle: pthread_t

    /// Starts `body` on a new thread.
    ///
    /// - Throws: ``RecordingTPMProxyError`` with code `.threadCreationFailed` and
    ///   pthread_create's error number.
    init(_ body: @escaping @Sendable () -> Void) throws(RecordingTPMProxyError) {
        let context = Unmanaged.passRetained(Body(body)).toOpaque()
        var handle = pthread_t()
        let result = pthread_create(&handle, nil, { raw in
            guard let raw else { return nil }
            Unmanaged<Body>.fromOpaque(raw).takeRetainedValue().run()
            return nil
        }, context)
        guard result == 0 else {
            Unmanaged<Body>.fromOpaque(context).release()
            throw RecordingTPMProxyError(.threadCreationFailed, "cannot start a proxy thread", systemErrno: result)
        }
        self.handle = handle
    }

    /// Waits for the thread to finish. Call exactly once.
    func join() {
        _ = pthread_join(handle, nil)
    }
}
