// tpm-keychain-face-probe: one operation of one in-process face (the Keychain API, SecItem,
// KeychainStorage), in a process of its own so that a test can run it as another user or while
// the keychain is locked, and read what the face answered.
//
//     tpm-keychain-face-probe FACE OPERATION --keychain DIR [--tcti TCTI]
//
// The items it works on are the ones EveryFaceDecisionTests sets up: service "face", account
// "item" (present) and "new" (absent); for KeychainStorage, the store "face" under
// TPM_KEYCHAIN_STORAGE_ROOT with the key "item" (`--set-up` makes it). Output: one line, "allowed" (exit 0) or
// "refused <what the face said>" (exit 3); 64 for a usage error. `--list` prints every
// FACE OPERATION pair this probe knows, one per line, so the test can require a row for each.
import Foundation
import KeychainStorageCompat
import SecurityCompat
import TPMKeychain

struct Refusal: Error {
    let description: String
}

/// One operation: what it does, through which face.
struct Probe: Sendable {
    let face: String
    let operation: String
    let run: @Sendable (KeychainLocation) async throws -> Void
}

let service = "face"

func keychain(_ location: KeychainLocation) throws -> Keychain {
    try Keychain(service: service, location: location)
}

/// A context that never prompts: a lock-bound item is read without a person.
func context(_ location: KeychainLocation) -> AuthenticationContext {
    let context = AuthenticationContext(location: location)
    context.interactionNotAllowed = true
    return context
}

/// SecItem's answer as an error unless it is errSecSuccess.
func secItem(_ status: OSStatus) throws {
    guard status == errSecSuccess else {
        let message = SecCopyErrorMessageString(status, nil).map { $0 as String } ?? ""
        let reason = KeychainEnvironment.lastUnavailableReason.map { " (\($0))" } ?? ""
        throw Refusal(description: "OSStatus \(status): \(message)\(reason)")
    }
}

func query(_ account: String) -> [String: Any] {
    [
        kSecClass as String: kSecClassGenericPassword, kSecAttrService as String: service,
        kSecAttrAccount as String: account,
    ]
}

func storage() throws -> KeychainStorage {
    try KeychainStorage.openStore(name: service)
}

let probes: [Probe] = [
    // The Keychain API.
    Probe(face: "keychain", operation: "string(forKey:)") { _ = try keychain($0).string(forKey: "item") },
    // As many reads as a busy process makes: past its 32nd, a process opens the store itself
    // rather than asking the session holder (WarmPathTests).
    Probe(face: "keychain", operation: "string(forKey:) 40 times") {
        for _ in 0..<40 { _ = try keychain($0).string(forKey: "item") }
    },
    Probe(face: "keychain", operation: "get(_:context:)") {
        let _: String? = try await keychain($0).get("item", context: context($0))
    },
    Probe(face: "keychain", operation: "attributes(forKey:)") { _ = try keychain($0).attributes(forKey: "item") },
    Probe(face: "keychain", operation: "contains(_:)") { _ = try keychain($0).contains("item") },
    Probe(face: "keychain", operation: "allKeys()") { _ = try keychain($0).allKeys() },
    Probe(face: "keychain", operation: "allItems()") { _ = try keychain($0).allItems() },
    Probe(face: "keychain", operation: "Keychain.allItems(in:)") { _ = try Keychain.allItems(in: $0) },
    Probe(face: "keychain", operation: "accessControl(forKey:)") { _ = try keychain($0).accessControl(forKey: "item") },
    Probe(face: "keychain", operation: "set(_:forKey:)") { try keychain($0).set("replaced", forKey: "item") },
    Probe(face: "keychain", operation: "set(_:forKey:accessControl:)") {
        try await keychain($0).set("replaced", forKey: "item", accessControl: AccessControl(.whenUnlocked))
    },
    Probe(face: "keychain", operation: "add(_:forKey:)") { try keychain($0).add("added", forKey: "new") },
    Probe(face: "keychain", operation: "updateAttributes(forKey:)") {
        try keychain($0).updateAttributes(forKey: "item", label: "relabelled")
    },
    Probe(face: "keychain", operation: "remove(_:)") { _ = try keychain($0).remove("item") },
    Probe(face: "keychain", operation: "removeAll()") { _ = try keychain($0).removeAll() },
    // SecItem.
    Probe(face: "secItem", operation: "SecItemCopyMatching data") { _ in
        var result: AnyObject?
        try secItem(
            SecItemCopyMatching(query("item").merging([kSecReturnData as String: true]) { $1 } as CFDictionary, &result)
        )
    },
    Probe(face: "secItem", operation: "SecItemCopyMatching attributes") { _ in
        var result: AnyObject?
        try secItem(
            SecItemCopyMatching(
                query("item").merging([kSecReturnAttributes as String: true]) { $1 } as CFDictionary, &result))
    },
    Probe(face: "secItem", operation: "SecItemAdd") { _ in
        try secItem(
            SecItemAdd(query("new").merging([kSecValueData as String: Data("added".utf8)]) { $1 } as CFDictionary, nil))
    },
    Probe(face: "secItem", operation: "SecItemUpdate") { _ in
        try secItem(
            SecItemUpdate(
                query("item") as CFDictionary, [kSecValueData as String: Data("replaced".utf8)] as CFDictionary))
    },
    Probe(face: "secItem", operation: "SecItemDelete") { _ in try secItem(SecItemDelete(query("item") as CFDictionary))
    },
    // KeychainStorage.
    Probe(face: "keychainStorage", operation: "data(for:)") { _ in _ = try storage().data(for: "item") },
    Probe(face: "keychainStorage", operation: "keys()") { _ in _ = try storage().keys() },
    Probe(face: "keychainStorage", operation: "put(data:for:)") { _ in
        try storage().put(data: Data("replaced".utf8), for: "item")
    },
    Probe(face: "keychainStorage", operation: "removeData(for:)") { _ in try storage().removeData(for: "item") },
    Probe(face: "keychainStorage", operation: "removeAllData()") { _ in try storage().removeAllData() },
    Probe(face: "keychainStorage", operation: "removeStore(name:)") { _ in
        try KeychainStorage.removeStore(name: service)
    },
]

func emit(_ line: String) {
    FileHandle.standardOutput.write(Data((line + "\n").utf8))
}

func argument(_ name: String) -> String? {
    guard let index = CommandLine.arguments.firstIndex(of: name), index + 1 < CommandLine.arguments.count else {
        return nil
    }
    return CommandLine.arguments[index + 1]
}

// --set-up: creates the KeychainStorage store the probes use, with its key "item".
if CommandLine.arguments.contains("--set-up") {
    do {
        try KeychainStorage.createStore(name: service).put(data: Data("stored".utf8), for: "item")
        emit("set up")
        exit(0)
    } catch {
        emit("failed \(error)")
        exit(1)
    }
}
if CommandLine.arguments.contains("--list") {
    for probe in probes { emit("\(probe.face)\t\(probe.operation)") }
    exit(0)
}
let arguments = CommandLine.arguments
guard arguments.count >= 3, let path = argument("--keychain"),
    let probe = probes.first(where: { $0.face == arguments[1] && $0.operation == arguments[2] })
else {
    FileHandle.standardError.write(
        Data("usage: tpm-keychain-face-probe FACE OPERATION --keychain DIR [--tcti TCTI] | --list\n".utf8))
    exit(64)
}
do {
    let location = try KeychainLocation(path: path, tcti: argument("--tcti"))
    KeychainEnvironment.location = location
    try await probe.run(location)
    emit("allowed")
    exit(0)
} catch let error as KeychainError {
    emit("refused \(error.code): \(error)")
    exit(3)
} catch let error as Refusal {
    emit("refused \(error.description)")
    exit(3)
} catch {
    emit("refused \(error)")
    exit(3)
}
