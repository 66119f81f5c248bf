import ArgumentParser
import CommandLineSupport
import ToolSupport

#if canImport(Glibc)
import Glibc
#endif

/// `tpm-keychain-secret-service`: the Secret Service daemon and its import, in a binary of their
/// own so that the CLI people run for each lookup links neither the daemon nor D-Bus. Users run
/// it as `tpm-keychain secret-service ...`, which hands over to this binary beside it.
@main
struct SecretServiceTool: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "tpm-keychain secret-service",
        abstract: HandedOverVerb.secretService.abstract,
        discussion: ExitStatus.helpText,
        subcommands: [SecretServiceServe.self, SecretServiceImport.self, SecretServiceMoveToPortal.self],
        defaultSubcommand: SecretServiceServe.self)

    static func main() {
        CommandStart.prepare()
        main(nil)
    }
}
