import Synchronization
import SystemCalls

/// A seam under the store's write path, for tests: makes one step of an atomic file replace fail
/// with an errno, as a full disk or a failing device would, without needing either.
///
/// Like swift-system's mocking layer it sits directly under the system calls; unlike it, it is
/// compiled into every build, since a test of the release build is worth as much as one of the
/// debug build. It is `package`: only this package's code (its tests) can arm it. Disarmed, each
/// step costs one relaxed atomic load, next to a system call that writes to disk.
package enum FaultInjection {
    /// The steps of ``Directory/replace(_:with:durable:syncDirectory:)``, in order.
    package enum Step: String, CaseIterable, Sendable {
        /// Creating `<name>.tmp`.
        case createTemporary
        /// Writing its bytes.
        case write
        /// fsync of the file.
        case syncFile
        /// Renaming it over `<name>`.
        case rename
        /// fsync of the directory, which makes the rename durable.
        case syncDirectory
    }

    package struct Fault: Sendable {
        package var step: Step
        package var errno: Int32
        /// Only files whose path contains this fail (nil: every file). The seam is process-wide:
        /// tests name their own store's directory here, so that others running alongside are unaffected.
        package var pathContaining: String?
        /// How many matching steps fail before the fault disarms itself (nil: until ``disarm()``).
        package var times: Int?
        /// How many matching steps succeed before the first failure.
        package var skipping: Int
    }

    private static let isArmed = Atomic<Bool>(false)
    private static let fault = Locked<Fault?>(nil)

    /// Makes `step` fail with `errno` for files whose path contains `pathContaining`, after
    /// letting `skipping` of them through.
    package static func arm(
        _ step: Step, errno: Int32, pathContaining: String? = nil, times: Int? = nil, skipping: Int = 0
    ) {
        fault.withLock {
            $0 = Fault(step: step, errno: errno, pathContaining: pathContaining, times: times, skipping: skipping)
        }
        isArmed.store(true, ordering: .releasing)
    }

    package static func disarm() {
        isArmed.store(false, ordering: .releasing)
        fault.withLock { $0 = nil }
    }

    /// Throws the armed errno instead of letting `step` on `path` run.
    static func check(_ step: Step, path: @autoclosure () -> String) throws(Errno) {
        guard isArmed.load(ordering: .relaxed) else { return }
        let code = fault.withLock { (fault) -> Int32? in
            guard var armed = fault, armed.step == step, armed.pathContaining.map({ path().contains($0) }) ?? true
            else { return nil }
            if armed.skipping > 0 {
                armed.skipping -= 1
                fault = armed
                return nil
            }
            if let times = armed.times {
                armed.times = times - 1
                fault = times > 1 ? armed : nil
            }
            return armed.errno
        }
        if let code { throw Errno(rawValue: code) }
    }
}

/// A seam for tests of stores written before 2026-11-27: while armed for a path, key records and
/// device passcode keys under it are sealed as they were then, with PolicyCommandCode(Unseal) at
/// the end of every policy (see `KeyRecord.sealedPolicy`), so that tests can show they still open.
/// `package`, like ``FaultInjection``: only this package's tests arm it.
package enum LegacySealing {
    private static let paths = Locked<[String]>([])

    /// Seals as before 2026-11-27 under every path containing `fragment` until ``disarm(_:)``.
    package static func arm(forPathsContaining fragment: String) { paths.withLock { $0.append(fragment) } }

    package static func disarm(_ fragment: String) { paths.withLock { $0.removeAll { $0 == fragment } } }

    /// Whether `path` is sealed the old way now.
    static func applies(to path: String) -> Bool {
        paths.withLock { fragments in fragments.contains { path.contains($0) } }
    }
}
