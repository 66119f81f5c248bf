import Testing

extension Tag {
    /// Tests that share state between threads, tasks or processes: what Scripts/tsan.sh finds by
    /// this tag and runs under ThreadSanitizer.
    @Tag static var concurrency: Self
}
