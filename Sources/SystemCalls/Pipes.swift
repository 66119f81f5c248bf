import CSystemCalls

/// `pipe2(O_CLOEXEC)`: both ends close on exec, atomically.
///
/// - Throws: `Errno` from pipe2.
package func makeCloseOnExecPipe() throws(Errno) -> (read: Int32, write: Int32) {
    var ends: [Int32] = [-1, -1]
    try retryingInterrupts { tk_pipe_cloexec(&ends) }
    return (ends[0], ends[1])
}
