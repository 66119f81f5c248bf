import TPMKeychain

/// Runs async work (an authenticator's prompt) from the synchronous SecItem functions.
enum Blocking {
    static func run<R: Sendable>(_ body: @escaping @Sendable () async throws(SecStatus) -> R) throws(SecStatus) -> R {
        try SynchronousWait.run { () async -> Result<R, SecStatus> in
            do throws(SecStatus) { return .success(try await body()) } catch { return .failure(error) }
        }.get()
    }
}
