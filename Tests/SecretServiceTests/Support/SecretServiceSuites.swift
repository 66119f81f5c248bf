import Testing

/// Every Secret Service suite, one test at a time: each starts its own dbus-daemon, swtpm and
/// daemon, and waits for child processes on its thread, so two at once would only hold more of
/// the test runner's threads.
@Suite(.serialized)
enum SecretServiceSuites {}
