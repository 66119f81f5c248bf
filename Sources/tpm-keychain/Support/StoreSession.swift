import ArgumentParser
import TPMKeychain

/// `--keychain DIR`, shared by every verb that works on a store.
struct KeychainOptions: ParsableArguments {
    @Option(name: .long, help: ArgumentHelp("The keychain store's directory.", valueName: "dir"),
            completion: .directory)
    var keychain: String = KeychainLocation.default.path

    /// The store directory, absolute.
    var path: String { StoreDirectory.absolute(keychain) }
}

/// A store directory plus the TPM chosen for it, for the length of one command.
///
/// ``close()`` erases the store's keys from memory and stops an embedded simulator; every verb
/// closes its session on every path, errors included.
final class StoreSession {
    let path: String
    let selection: TPMSelection
    let location: KeychainLocation

    /// - Parameter announceSimulation: say on stderr when an embedded simulator stands in for the
    ///   hardware; commands whose own output says so turn it off.
    init(path: String, announceSimulation: Bool = true) throws {
        self.path = path
        selection = try TPMSelection(storeDirectory: path)
        location = KeychainLocation(path: path, tcti: selection.configuration.tcti)
        if announceSimulation && selection.isEmbeddedSimulator {
            printError("tpm-keychain: note: \(selection.summary)")
        }
    }

    func close() {
        Keychain.closeStore(location)
        selection.stop()
    }

    /// Opens a session on `path`, runs `body`, and closes the session whatever happens.
    static func with<R>(_ path: String, _ body: (StoreSession) throws -> R) throws -> R {
        let session = try StoreSession(path: path)
        defer { session.close() }
        return try body(session)
    }
}

/// Where a verb writes its results: standard output, or the demo's indented transcript.
typealias OutputLine = (String) -> Void
