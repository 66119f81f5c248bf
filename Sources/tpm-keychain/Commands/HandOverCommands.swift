import ArgumentParser
import CommandLineSupport
import ToolSupport

/// `tpm-keychain secret-service ...`: handed over, arguments and all, to
/// `tpm-keychain-secret-service` beside this binary, so that the CLI people run for each lookup
/// does not carry the daemon and D-Bus.
struct SecretServiceCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: HandedOverVerb.secretService.name, abstract: HandedOverVerb.secretService.abstract,
        discussion: "Runs tpm-keychain-secret-service, installed beside tpm-keychain; see its --help.")

    @Argument(parsing: .captureForPassthrough, help: "serve (the default) or import, and their options.")
    var arguments: [String] = []

    func run() throws { try handOver(.secretService, arguments) }
}

/// `tpm-keychain key ...`: handed over to `tpm-keychain-keys` beside this binary, so that the CLI
/// people run for each lookup does not link SecKey, X.509 and the Foundation they bring.
struct KeyCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: HandedOverVerb.key.name, abstract: HandedOverVerb.key.abstract,
        discussion: "Runs tpm-keychain-keys, installed beside tpm-keychain; see tpm-keychain key --help.")

    @Argument(
        parsing: .captureForPassthrough, help: "create, list, public, sign, export or delete, and their options.")
    var arguments: [String] = []

    func run() throws { try handOver(.key, arguments) }
}

private func handOver(_ verb: HandedOverVerb, _ arguments: [String]) throws {
    let failure = verb.handOver(arguments)
    printError("tpm-keychain: " + failure.message)
    throw ExitCode(failure.status)
}
