import ArgumentParser

/// The flags both add verbs take, as `security` spells them: the password, -U, the label and
/// comment, and --allow-empty.
struct NewItemOptions: ParsableArguments {
    @Option(
        name: [.customShort("w"), .customLong("password")], parsing: .unconditional,
        help: "The password. Visible to other users in the process list while the command runs: prefer standard input.")
    var password: String?

    @Flag(name: [.customShort("U"), .customLong("update")], help: "Update the item if it already exists.")
    var update = false

    @Flag(
        name: .customLong("allow-empty"),
        help: "Accept an empty password from standard input (otherwise refused as a likely mistake).")
    var allowEmpty = false

    @Option(name: [.customShort("l"), .customLong("label")], parsing: .unconditional, help: "Label (kSecAttrLabel).")
    var label: String?

    @Option(
        name: [.customShort("j"), .customLong("comment")], parsing: .unconditional, help: "Comment (kSecAttrComment).")
    var comment: String?
}
