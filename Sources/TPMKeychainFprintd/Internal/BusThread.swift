// A pthread of LogindSessionLock's own, joined by stop(). Not Foundation.Thread, which cannot be
// joined, and not a Dispatch queue, whose worker the follower would hold for the lock's lifetime.

import SystemCalls
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

struct BusThread: Sendable {
    private final class Body {
        let run: @Sendable () -> Void
        init(_ run: @escaping @Sendable () -> Void) { self.run = run }
    }

    private let handle: pthread_t

    /// Starts `body` on a new thread.
    ///
    /// - Throws: ``LogindSessionLockError`` `.systemCallFailed` with pthread_create's error number.
    init(_ body: @escaping @Sendable () -> Void) throws(LogindSessionLockError) {
        let context = Unmanaged.passRetained(Body(body)).toOpaque()
        var handle = pthread_t()
        let result = pthread_create(&handle, nil, { raw in
            guard let raw else { return nil }
            Unmanaged<Body>.fromOpaque(raw).takeRetainedValue().run()
            return nil
        }, context)
        guard result == 0 else {
            Unmanaged<Body>.fromOpaque(context).release()
            throw LogindSessionLockError(.systemCallFailed, "Cannot start the session lock's thread", underlying: Errno(rawValue: result))
        }
        self.handle = handle
    }

    /// Waits for the thread to finish. Call exactly once, from another thread.
    func join() {
        _ = pthread_join(handle, nil)
    }
}
