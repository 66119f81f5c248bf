#if canImport(Glibc)
import Glibc
#endif

/// Writes all of `bytes` to `descriptor`: short writes go on, EINTR is retried.
///
/// - Throws: `Errno` from write(2); a write of nothing (a full device that accepts no byte) is EIO.
package func writeAll(_ descriptor: Int32, _ bytes: [UInt8]) throws(Errno) {
    var offset = 0
    while offset < bytes.count {
        let written = try retryingInterrupts {
            bytes[offset...].withUnsafeBytes { write(descriptor, $0.baseAddress, $0.count) }
        }
        guard written > 0 else { throw Errno(rawValue: EIO) }
        offset += written
    }
}

/// Sends `bytes` on the connected socket `descriptor`, whole, retrying interrupted sends. With
/// MSG_NOSIGNAL: a peer that hung up is an error (EPIPE) for this call, never the SIGPIPE that
/// would end the whole process, as it would a server's for one client leaving early.
///
/// - Throws: ``Errno`` from send(2), or EIO when nothing could be sent.
package func sendAll(_ descriptor: Int32, _ bytes: [UInt8]) throws(Errno) {
    var offset = 0
    while offset < bytes.count {
        let sent = try retryingInterrupts {
            bytes[offset...].withUnsafeBytes { send(descriptor, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
        }
        guard sent > 0 else { throw Errno(rawValue: EIO) }
        offset += sent
    }
}

/// Writes `text` to standard error, whole. A message that cannot be written has nowhere else to
/// go, so a failure is dropped. Instead of Foundation's `FileHandle`, which brings its string
/// machinery and ICU into a static binary.
package func writeStandardError(_ text: String) {
    try? writeAll(STDERR_FILENO, Array(text.utf8))
}

/// Writes all of `bytes` to `descriptor`, a pipe or file another process holds, without letting a
/// reader that hung up end this process: SIGPIPE is blocked on this thread for the writes, and
/// one they raised is taken before the block is lifted, so the hang-up is EPIPE for this call
/// alone. A pipe that is full waits for room at most `timeout` milliseconds at a time.
///
/// - Throws: ``Errno`` from write(2) (EPIPE for a reader that left), ETIMEDOUT when no room came.
package func writeAllToPeer(
    _ descriptor: Int32, _ bytes: UnsafeRawBufferPointer, timeout: Int32
) throws(Errno) {
    var pipeSignal = sigset_t()
    sigemptyset(&pipeSignal)
    sigaddset(&pipeSignal, SIGPIPE)
    var previous = sigset_t()
    pthread_sigmask(SIG_BLOCK, &pipeSignal, &previous)
    defer {
        var pending = sigset_t()
        sigpending(&pending)
        if sigismember(&pending, SIGPIPE) == 1, sigismember(&previous, SIGPIPE) == 0 {
            var now = timespec()
            _ = sigtimedwait(&pipeSignal, nil, &now)
        }
        pthread_sigmask(SIG_SETMASK, &previous, nil)
    }
    var offset = 0
    while offset < bytes.count {
        let written = write(descriptor, bytes.baseAddress! + offset, bytes.count - offset)
        if written > 0 {
            offset += written
            continue
        }
        let error = written < 0 ? errno : EIO
        if error == EINTR { continue }
        guard error == EAGAIN else { throw Errno(rawValue: error) }
        var request = pollfd(fd: descriptor, events: Int16(POLLOUT), revents: 0)
        guard poll(&request, 1, timeout) > 0 else { throw Errno(rawValue: ETIMEDOUT) }
    }
}
