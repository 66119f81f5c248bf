import ArgumentParser
import TPMKeychain
import ToolSupport

/// `--keychain DIR`, shared by every verb that works on a store.
struct KeychainOptions: ParsableArguments {
    @Option(
        name: .long, help: ArgumentHelp("The keychain store's directory.", valueName: "dir"),
        completion: .directory)
    var keychain: String = KeychainLocation.default.path

    /// The store directory, absolute.
    var path: String { StoreDirectory.absolute(keychain) }
}

/// Where a verb writes its results: standard output, or the demo's indented transcript.
typealias OutputLine = (String) -> Void
