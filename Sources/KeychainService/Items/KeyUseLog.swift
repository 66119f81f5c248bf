import FoundationEssentials
import KeychainVocabulary
import SystemCalls
import WireFormat

#if canImport(Glibc)
import Glibc
#endif

/// Every use of a key that lives in the TPM, by any face (the ssh agent, the PKCS#11 module
/// through it, `tpm-keychain key sign`, SecKey), one line each, in the user's state directory:
/// `$XDG_STATE_HOME/tpm-keychain/key-uses.log` (else `~/.local/state/...`), mode 0600. The line
/// names the time, the operation, the key's label, the caller (face, uid, executable) and the
/// outcome; never a secret or the data signed.
///
/// Written where the door decides, so that no face can use a key without a line. A line is one
/// `write` with O_APPEND, so lines of several processes never interleave. The log is the owner's
/// record of what happened, not a protection: a program of the same user can edit it (issue a
/// tamper-evident audit for that); a line that cannot be written is dropped, never a reason to
/// refuse the use.
package enum KeyUseLog {
    /// The log's directory and path, worked out once per process: the state directory reads the
    /// whole environment, which a signature should not pay for each time.
    private static let directory = Devices.stateDirectory
    package static let path = directory + "/key-uses.log"

    /// Appends one line: `operation` on the key `label` for `caller`, with its `outcome`.
    static func record(_ operation: String, label: String, caller: AccessCaller, outcome: String) {
        let time = Date.now.formatted(.iso8601)
        let program = caller.executable.map { DisplayText.quoted($0, limit: 200) } ?? "an unknown program"
        let line =
            "\(time) \(operation) \(DisplayText.quoted(label, limit: 200)) by \(program) (\(caller.face.rawValue), uid \(caller.uid)): \(DisplayText.quoted(outcome, limit: 400))\n"
        let flags = O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOFOLLOW
        var descriptor = open(path, flags, 0o600)
        // The directory is made the first time only: a signature does not pay for mkdir -p.
        if descriptor < 0, errno == ENOENT {
            try? createDirectories(directory)
            descriptor = open(path, flags, 0o600)
        }
        guard descriptor >= 0 else { return }
        defer { close(descriptor) }
        try? writeAll(descriptor, Array(line.utf8))
    }
}
