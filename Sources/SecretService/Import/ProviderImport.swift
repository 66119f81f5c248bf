import DBus
import FoundationEssentials
import SystemCalls
import TPMKeychain

/// Moving in: every item of another running Secret Service provider (gnome-keyring, KWallet's
/// Secret Service, KeePassXC, another tpm-keychain) copied into our collections, through the
/// provider's own D-Bus API as any client reads it, with its label and attributes. Collections
/// are kept: the source's default collection goes into ``Options/into`` and each other one into
/// a store named after its label (``Options/mergeCollections`` puts everything in ``Options/into``);
/// the source's `session` collection, in memory by design, is left alone. Nothing is removed from
/// the source. The secrets cross the bus encrypted (a DH session). Re-running it replaces what it
/// copied before: an item with exactly the same attributes is rewritten, not duplicated.
package enum ProviderImport {
    package struct Options: Sendable {
        /// The source's bus: nil for the session bus.
        package var address: String?
        /// The name the source owns.
        package var busName = SecretServiceDaemon.busName
        /// Only the collections with these labels (all when empty).
        package var collections: [String] = []
        /// Our data directory, and the store (collection) that receives the source's default
        /// collection.
        package var dataDirectory: String
        package var into = "default"
        /// Everything into ``into``, instead of a store per source collection.
        package var mergeCollections = false
        /// Whether a store created for the import may be sealed to a simulated TPM kept in it when
        /// no TPM is usable; otherwise the import fails with what to do.
        package var allowsSimulatedTPM = false

        package init(address: String?, dataDirectory: String) {
            self.address = address
            self.dataDirectory = dataDirectory
        }
    }

    package struct Report: Sendable, Equatable {
        package var imported = 0
        package var collections = 0
        /// Labels of the source's collections that stayed locked (the unlock was dismissed).
        package var locked: [String] = []
        /// Our stores that received items, by name.
        package var stores: [String] = []
    }

    package struct Failure: Error, CustomStringConvertible {
        package let description: String
        init(_ description: String) { self.description = description }
    }

    private static let service = "/org/freedesktop/secrets"
    private static let serviceInterface = "org.freedesktop.Secret.Service"
    private static let properties = "org.freedesktop.DBus.Properties"

    /// Copies the items; `progress(done, total)` is called after each.
    package static func run(_ options: Options, progress: (Int, Int) -> Void) throws(Failure) -> Report {
        let source = try ProviderClient.connect(
            address: options.address, name: options.busName, description: "tpm-keychain-import")
        let session = try source.openSession()

        var targets: [String: SecretCollection] = [:]
        defer { for target in targets.values { target.close() } }
        var report = Report()
        let defaultCollection = try? source.call(service, serviceInterface, "ReadAlias", [.string("default")]).first?
            .objectPath
        var work: [(store: String, items: [String])] = []
        for path in try source.objectPaths(service, serviceInterface, "Collections") {
            let label = (try? source.property(path, "org.freedesktop.Secret.Collection", "Label").string) ?? path
            guard options.collections.isEmpty || options.collections.contains(label) else { continue }
            // The session collection lives in memory by design: its items are not meant to persist.
            if path.hasSuffix("/collection/" + SecretCollection.sessionName) { continue }
            guard try source.unlock(path) else {
                report.locked.append(label)
                continue
            }
            let items = try source.objectPaths(path, "org.freedesktop.Secret.Collection", "Items")
            let store =
                options.mergeCollections || path == defaultCollection ? options.into : Self.storeName(for: label)
            if !items.isEmpty, targets[store] == nil {
                targets[store] = try targetCollection(options, store)
                report.stores.append(store)
            }
            work.append((store, items))
            report.collections += 1
        }
        let total = work.reduce(0) { $0 + $1.items.count }
        var done = 0
        for (store, items) in work {
            guard let target = targets[store] else { continue }
            // A batch per GetSecrets call: one round trip for many items.
            for start in stride(from: 0, to: items.count, by: 100) {
                let batch = Array(items[start..<min(start + 100, items.count)])
                let secrets = try source.secrets(batch, session: session)
                for path in batch {
                    guard var secret = secrets[path] else { continue }
                    defer { for index in secret.value.indices { secret.value[index] = 0 } }
                    let all = try source.allProperties(path, "org.freedesktop.Secret.Item")
                    let label = all["Label"]?.unwrapped.string ?? ""
                    let attributes = all["Attributes"]?.unwrapped.stringDictionary ?? [:]
                    do throws(SecretServiceError) {
                        _ = try target.create(
                            label: label, attributes: attributes, secret: secret.value, contentType: secret.contentType,
                            replace: true)
                    } catch {
                        throw Failure("the item \"\(label)\" could not be written: \(error.message)")
                    }
                    report.imported += 1
                    done += 1
                    progress(done, total)
                }
            }
        }
        return report
    }

    /// The store a source collection labelled `label` goes into: the label in lower case, each
    /// character other than a letter, digit, `-` or `_` made `_`; the same store on every run.
    static func storeName(for label: String) -> String {
        let name = String(
            label.lowercased().map { $0.isLetter || $0.isNumber || $0 == "-" || $0 == "_" ? $0 : "_" }.prefix(64))
        return name.isEmpty || name == SecretCollection.sessionName || name.hasPrefix(".") ? "imported" : name
    }

    /// Our collection the items go into, created (as create-keychain does) when it does not exist.
    private static func targetCollection(_ options: Options, _ name: String) throws(Failure) -> SecretCollection {
        let path = options.dataDirectory + "/" + name
        do {
            try createDirectories(options.dataDirectory)
            let location = try KeychainLocation(
                path: path, tpm: options.allowsSimulatedTPM ? .automaticOrSimulated : .automatic)
            if !location.storeExists { try location.createStore() }
        } catch {
            throw Failure("the collection \(name) could not be created in \(options.dataDirectory): \(error)")
        }
        return SecretCollection(name: name, storePath: path)
    }
}
