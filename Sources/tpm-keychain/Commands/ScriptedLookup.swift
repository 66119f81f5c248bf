import CommandLineSupport
import FoundationEssentials
import TPMKeychain
import ToolSupport

/// `find-generic-password -s SERVICE -a ACCOUNT -w [--keychain DIR]`, the lookup scripts run
/// most, recognised before ArgumentParser sees the arguments.
///
/// ArgumentParser builds its model of every verb by reflection, and in a binary this size the
/// Swift runtime's conformance scans behind that reflection cost about as much as the TPM work of
/// the lookup (docs/PERFORMANCE.md). Only this one exact shape is taken here; anything else
/// (another flag, a repeated option, a value that starts with `-`, an item that needs biometry or
/// the passcode) returns nil before printing anything, and ArgumentParser handles the command as
/// before, so both paths give the same output, messages and exit status.
enum ScriptedLookup {
    struct Request: Equatable {
        var service: String
        var account: String
        var keychain: String?
    }

    /// The request when `arguments` (without the program name) are exactly this lookup.
    static func parse(_ arguments: [String]) -> Request? {
        guard arguments.first == "find-generic-password" else { return nil }
        var service: String?
        var account: String?
        var keychain: String?
        var passwordOnly = false
        var remaining = arguments.dropFirst()[...]
        while let argument = remaining.popFirst() {
            let (name, attached) = split(argument)
            switch name {
            case "-w", "--password":
                guard attached == nil, !passwordOnly else { return nil }
                passwordOnly = true
            case "-s", "--service", "-a", "--account", "--keychain":
                // A short option never takes an attached `=value` in ArgumentParser's grammar.
                if attached != nil, !name.hasPrefix("--") { return nil }
                guard let value = attached ?? remaining.popFirst(), !value.isEmpty, !value.hasPrefix("-") else {
                    return nil
                }
                switch name {
                case "-s", "--service":
                    guard service == nil else { return nil }
                    service = value
                case "-a", "--account":
                    guard account == nil else { return nil }
                    account = value
                default:
                    guard keychain == nil else { return nil }
                    keychain = value
                }
            default:
                return nil
            }
        }
        guard passwordOnly, let service, let account else { return nil }
        return Request(service: service, account: account, keychain: keychain)
    }

    /// Runs the lookup and returns the exit status, or nil when the item needs a person (the full
    /// command then asks through an authentication context).
    static func run(_ request: Request) -> Int32? {
        do {
            let path = StoreDirectory.absolute(request.keychain ?? KeychainLocation.default.path)
            let found = try StoreSession.withExisting(path) { session -> Data? in
                let keychain = try Keychain(service: request.service, location: session.location).acting(for: .cli)
                return try keychain.data(forKey: request.account)
            }
            guard let secret = found else {
                printError(SecurityMessage.itemNotFound)
                return ExitStatus.itemNotFound
            }
            print(SecurityFormat.bareValue(secret))
            return 0
        } catch let error as KeychainError where error.code == .interactionNotAllowed {
            return nil
        } catch {
            return CommandErrorReport.status(reporting: error)
        }
    }

    /// `--name=value` as (`--name`, `value`); anything else as (itself, nil).
    private static func split(_ argument: String) -> (name: String, attached: String?) {
        guard argument.hasPrefix("--"), let equals = argument.firstIndex(of: "=") else { return (argument, nil) }
        return (String(argument[..<equals]), String(argument[argument.index(after: equals)...]))
    }
}
