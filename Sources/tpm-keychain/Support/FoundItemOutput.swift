import ArgumentParser
import CommandLineSupport
import FoundationEssentials

/// How the find verbs show what they found (`-w`, `-g`, `--json`), shared by
/// find-generic-password and find-internet-password.
struct FoundItemOutput: ParsableArguments {
    @Flag(name: [.customShort("w"), .customLong("password")], help: "Print only the password (to standard output).")
    var passwordOnly = false

    @Flag(
        name: [.customShort("g"), .customLong("show-password")],
        help: "Also print the password, on standard error as security does (password: \"...\").")
    var showPassword = false

    @Flag(name: .customLong("json"), help: "Print the item as a JSON object.")
    var json = false

    /// Whether the secret is shown at all (and so has to be read).
    var showsSecret: Bool { passwordOnly || showPassword }

    /// Prints `item` (with `secret` when it was read): one JSON object, the bare password, or
    /// `security`'s attribute block with the password on standard error.
    func show(_ item: ShownItem, keychain: String, secret: Data?, output: OutputLine, errorOutput: OutputLine) throws {
        if json {
            output(ItemJSON.text(.object(ItemJSON.object(item, keychain: keychain, secret: secret))))
        } else if passwordOnly, let secret {
            output(SecurityFormat.bareValue(secret))
        } else {
            SecurityFormat.attributeBlock(item, keychain: keychain).forEach(output)
            if let secret { errorOutput("password: " + SecurityFormat.value(secret)) }
        }
    }
}
