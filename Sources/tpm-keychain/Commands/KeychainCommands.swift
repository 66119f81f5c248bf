import ArgumentParser
import Foundation
import TPMKeychain
import ToolSupport

/// A keychain argument as `security` takes one: a name (a store in the data directory) or a path.
enum KeychainArgument {
    static func path(_ argument: String) throws -> String {
        if argument.contains("/") || argument.hasPrefix("~") { return StoreDirectory.absolute(argument) }
        return try KeychainLocation.named(argument).path
    }
}

/// `security create-keychain`: a new store, its master key sealed to the TPM now.
struct CreateKeychain: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "create-keychain",
        abstract: "Create a keychain store (a name in the data directory, or a path), its master key sealed to the TPM.")

    @Argument(help: ArgumentHelp("A store name (kept in the data directory) or a directory path.", valueName: "keychain"))
    var keychain: String

    func run() throws {
        try reportingErrors {
            let path = try KeychainArgument.path(keychain)
            let session = try StoreSession(path: path)
            defer { session.close() }
            do {
                try session.location.createStore()
            } catch let error as KeychainError where error.code == .duplicateItem {
                throw CommandFailure(ExitStatus.duplicateItem, "a keychain store already exists at \(path)")
            }
        }
    }
}

/// `security delete-keychain`: the store's files are deleted (its keys were never anywhere else).
struct DeleteKeychain: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "delete-keychain",
        abstract: "Delete a keychain store and every item in it, for good.")

    @Argument(help: ArgumentHelp("A store name or a directory path.", valueName: "keychain"))
    var keychain: String

    func run() throws {
        try reportingErrors {
            try KeychainLocation(path: try KeychainArgument.path(keychain)).removeStore()
        }
    }
}

/// `security list-keychains`: the stores in the data directory, quoted as security prints them.
struct ListKeychains: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "list-keychains",
        abstract: "List the keychain stores in the data directory ($XDG_DATA_HOME/tpm-keychain).")

    func run() throws {
        for name in KeychainLocation.storeNames() {
            print("    \"\(KeychainLocation.dataDirectory)/\(name)\"")
        }
    }
}
