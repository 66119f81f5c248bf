package import ArgumentParser
import TPMKeychain
import ToolSupport

/// `--keychain DIR`, shared by every verb that works on a store.
package struct KeychainOptions: ParsableArguments {
    package init() {}

    @Option(
        name: .long, help: ArgumentHelp("The keychain store's directory.", valueName: "dir"),
        completion: .directory)
    package var keychain: String = KeychainLocation.default.path

    /// The store directory, absolute.
    package var path: String { StoreDirectory.absolute(keychain) }
}

/// Where a verb writes its results: standard output, or the demo's indented transcript.
package typealias OutputLine = (String) -> Void
