public import Testing

/// SecItem's configuration (`KeychainEnvironment`) is process-wide, and every test target runs in
/// one process: a test that sets it must not overlap another that does, whichever target each is
/// in. Serializing one suite keeps its own tests apart, not those of another target (a git
/// credential test once ran its SecItem calls against the unreachable TPM another target's test
/// had just configured). Tests and suites marked `.keychainEnvironment` take turns.
///
/// The wait suspends the test's task instead of blocking its thread: the holder may itself await,
/// and on a two-core machine the cooperative pool has two threads.
public struct KeychainEnvironmentTurns: TestTrait, SuiteTrait, TestScoping {
    public var isRecursive: Bool { true }

    public func provideScope(
        for test: Test, testCase: Test.Case?, performing function: @Sendable () async throws -> Void
    ) async throws {
        // A suite's own scope surrounds its tests: only each test case takes a turn.
        guard testCase != nil else { return try await function() }
        await Turns.shared.acquire()
        do {
            try await function()
        } catch {
            await Turns.shared.release()
            throw error
        }
        await Turns.shared.release()
    }
}

extension Trait where Self == KeychainEnvironmentTurns {
    /// The test sets SecItem's process-wide configuration: it runs alone among such tests.
    public static var keychainEnvironment: Self { Self() }
}

/// One turn at a time, first come first served.
private actor Turns {
    static let shared = Turns()
    private var taken = false
    private var waiting: [CheckedContinuation<Void, Never>] = []

    func acquire() async {
        guard taken else {
            taken = true
            return
        }
        await withCheckedContinuation { waiting.append($0) }
    }

    func release() {
        if waiting.isEmpty { taken = false } else { waiting.removeFirst().resume() }
    }
}
