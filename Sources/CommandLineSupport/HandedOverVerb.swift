import SystemCalls
import ToolSupport

#if canImport(Glibc)
import Glibc
#endif

/// A verb of `tpm-keychain` whose work a binary beside it does: `tpm-keychain` execs that binary
/// with the arguments that follow (same process, same descriptors), so that the binary people run
/// for each lookup links none of what the verb needs (the daemon and D-Bus; SecKey and X.509).
package struct HandedOverVerb: Sendable {
    /// The verb, as typed after `tpm-keychain`.
    package let name: String
    /// The binary that does its work, installed beside `tpm-keychain`.
    package let executableName: String
    /// One line for `tpm-keychain --help`, the same in both binaries.
    package let abstract: String

    /// `tpm-keychain key ...`: keys in the TPM, through SecKey.
    package static let key = HandedOverVerb(
        name: "key", executableName: "tpm-keychain-keys",
        abstract: "Keys that live in the TPM: create, list, print the public key, sign, write a key file, delete.")

    /// `tpm-keychain secret-service ...`: the desktop's keyring.
    package static let secretService = HandedOverVerb(
        name: "secret-service", executableName: "tpm-keychain-secret-service",
        abstract:
            "The desktop's Secret Service (org.freedesktop.secrets): serve the stores, or import another provider's items."
    )

    /// The binary's path: beside this process's own executable.
    package var path: String {
        let executable = executablePath() ?? CommandLine.arguments[0]
        let directory = executable.lastIndex(of: "/").map { String(executable[..<$0]) } ?? "."
        return directory + "/" + executableName
    }

    /// Replaces this process with the verb's binary, given `arguments`; returns only when that
    /// fails, with a message for people and the exit status to end with.
    package func handOver(_ arguments: [String]) -> (message: String, status: Int32) {
        let path = path
        var argv = ([path] + arguments).map { strdup($0) }
        argv.append(nil)
        execv(path, argv)
        let reason = Errno.current
        for pointer in argv { free(pointer) }
        return (
            "\(name) runs \(path), which \(reason.rawValue == ENOENT ? "is not installed" : "cannot start: \(reason)"): install it beside tpm-keychain (Scripts/install-cli.sh does)",
            ExitStatus.unavailable
        )
    }
}
