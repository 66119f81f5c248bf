import Synchronization
import SystemCalls

/// A seam for tests: the store's whole-store operations (a key rotation, the upgrade to format 2,
/// KeychainStorage's cipher change), and each atomic file replace, report how far they got, so that a crash test can kill a
/// process at a point it chose from observed progress, on either side of the commit, instead of
/// at a fraction of a measured duration, which a loaded machine shifts.
///
/// `package`, like ``FaultInjection``: only this package's code (its stress tool) installs an
/// observer. Without one, a report costs one relaxed atomic load.
package enum OperationProgress {
    package enum Event: Sendable, Equatable, CustomStringConvertible {
        /// `count` items are written, durably, in the operation's new copy of the store.
        case rewrote(Int)
        /// The switch to the new copy is durable: from here on a kill leaves the new copy in charge.
        case committed
        /// A file's new contents are written (as `<name>.tmp`) and about to be renamed over `name`:
        /// a kill here is one in the middle of a write.
        case replacing(String)

        package var description: String {
            switch self {
            case .rewrote(let count): "rewrote \(count)"
            case .committed: "committed"
            case .replacing(let name): "replacing \(name)"
            }
        }
    }

    private static let isObserved = Atomic<Bool>(false)
    private static let observer = Locked<(@Sendable (Event) -> Void)?>(nil)

    /// Calls `observer` with every event this process reports from now on, on the thread that
    /// reports it (which waits for it to return).
    package static func observe(_ observer: @escaping @Sendable (Event) -> Void) {
        self.observer.withLock { $0 = observer }
        isObserved.store(true, ordering: .releasing)
    }

    package static func report(_ event: @autoclosure () -> Event) {
        guard isObserved.load(ordering: .relaxed), let observer = observer.withLock({ $0 }) else { return }
        observer(event())
    }
}
