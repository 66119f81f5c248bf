import Testing

extension Tag {
    /// Tests that share state between threads, tasks or processes: what Scripts/tsan.sh runs
    /// under ThreadSanitizer (`--filter tag:concurrency`).
    @Tag static var concurrency: Self
}
