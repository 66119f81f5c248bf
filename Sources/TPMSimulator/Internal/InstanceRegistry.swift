// Process-wide list of running simulators, so that a normal exit of a test run (which skips
// deinit of globals and leaked objects) still stops every swtpm in order. Abnormal exits are the
// watchdog's job. Entries are weak: the registry must not keep an instance from deinit-stopping.

import SystemCalls

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

enum InstanceRegistry {
    private struct WeakInstance: Sendable {
        weak var instance: SoftwareTPM?
    }

    private static let instances = Locked<[ObjectIdentifier: WeakInstance]>([:])

    /// Installed on first registration; Swift initializes static lets exactly once, thread-safely.
    private static let exitHandlerInstalled: Bool = {
        atexit { InstanceRegistry.stopAll() }
        return true
    }()

    static func register(_ instance: SoftwareTPM) {
        _ = exitHandlerInstalled
        instances.withLock { $0[ObjectIdentifier(instance)] = WeakInstance(instance: instance) }
    }

    static func unregister(_ identifier: ObjectIdentifier) {
        _ = instances.withLock { $0.removeValue(forKey: identifier) }
    }

    static var runningCount: Int {
        instances.withLock { $0.values.count { $0.instance != nil } }
    }

    static func stopAll() {
        // Snapshot first: stop() unregisters, which takes the lock again.
        let running = instances.withLock { $0.values.compactMap(\.instance) }
        for instance in running { instance.stop() }
    }
}
