import FoundationEssentials

#if canImport(Glibc)
import Glibc
#endif

/// A password given with `-w` is in argv, which every local user reads through
/// /proc/PID/cmdline (and ps) for as long as the command runs. Like database clients, the command
/// overwrites it in its own argv as soon as it starts: parsing uses the copy Swift made, and the
/// window shrinks to the microseconds before ``hide()`` runs. The warning stays, since that window
/// and the shell's history remain.
enum PasswordArgument {
    /// The verbs whose `-w` / `--password` takes a value (the find verbs' `-w` is a flag).
    static let verbs: Set<String> = ["add-generic-password", "add-internet-password"]

    /// Overwrites, in place, the value of every `-w`, `--password` and `--password=` of an add verb.
    static func hide() {
        // The arguments are copied into Swift strings first: everything after reads the copy.
        _ = CommandLine.arguments
        let count = Int(CommandLine.argc)
        let argv = CommandLine.unsafeArgv
        guard count > 2, let verb = argv[1], verbs.contains(String(cString: verb)) else { return }
        var index = 2
        while index < count, let argument = argv[index] {
            let text = String(cString: argument)
            if text == "-w" || text == "--password", index + 1 < count, let value = argv[index + 1] {
                overwrite(value, from: 0)
                index += 2
                continue
            }
            if text.hasPrefix("--password=") { overwrite(argument, from: "--password=".utf8.count) }
            index += 1
        }
    }

    private static func overwrite(_ argument: UnsafeMutablePointer<CChar>, from offset: Int) {
        let length = strlen(argument)
        guard length > offset else { return }
        memset(argument + offset, Int32(UInt8(ascii: "x")), length - offset)
    }
}
