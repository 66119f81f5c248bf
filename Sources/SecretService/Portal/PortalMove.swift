import DBus
import FoundationEssentials
import Secrets
import SystemCalls
import TPMKeychain

#if canImport(Glibc)
import Glibc
#endif

/// Moving a sandboxed application's items out of the Secret Service into its own keyring file,
/// the one libsecret in the sandbox opens with the Secret portal's secret: for an application
/// that used the Secret Service through a hole in its sandbox and now has the portal. The items
/// are those whose attributes include the ones given (the application's, such as its
/// `xdg:schema`); they are read through the running provider's D-Bus API as any client reads
/// them (so the provider's own decision point and audit trail see the reads), sealed with the
/// secret our TPM derives for the application (``ItemService/applicationSecret(for:)``, the
/// same the portal hands it), merged into its file, read back, and only then deleted from the
/// provider. The file is not written while the application runs: libsecret in it would write
/// its own view back over ours.
package enum PortalMove {
    package struct Options: Sendable {
        package var applicationID: String
        /// The attributes an item must have to be moved; at least one.
        package var attributes: [String: String]
        /// Our data directory: the portal's secret comes from the store the `default` alias names.
        package var dataDirectory: String
        /// The keyring file; nil for the application's, `~/.var/app/ID/data/keyrings/default.keyring`.
        package var keyringFile: String?
        /// Copy only: leave the items in the provider.
        package var keepsOriginals = false
        /// The provider's bus: nil for the session bus.
        package var address: String?

        package init(applicationID: String, attributes: [String: String], dataDirectory: String) {
            self.applicationID = applicationID
            self.attributes = attributes
            self.dataDirectory = dataDirectory
        }
    }

    package struct Report: Sendable, Equatable {
        package var moved: [String] = []
        package var keyringFile = ""
        /// Items that stayed locked (their unlock was dismissed) or whose delete needed a prompt.
        package var leftLocked = 0
        package var notDeleted = 0
    }

    package typealias Failure = ProviderImport.Failure

    package static func run(_ options: Options) throws(Failure) -> Report {
        let id = options.applicationID
        guard isApplicationID(id) else {
            throw Failure(
                "\"\(id)\" is not a Flatpak application ID (letters, digits, '_', '-' and '.', 1 to 255 bytes)")
        }
        guard !options.attributes.isEmpty else {
            throw Failure("name at least one attribute of the application's items (--attribute name=value)")
        }
        let file: String
        if let chosen = options.keyringFile { file = chosen } else { file = try defaultKeyringFile(for: id) }
        try refuseWhileRunning(id)

        let source = try ProviderClient.connect(
            address: options.address, name: SecretServiceDaemon.busName, description: "tpm-keychain-portal-move")
        var report = Report()
        report.keyringFile = file
        var (items, locked) = try source.searchItems(options.attributes)
        for path in locked {
            if try source.unlock(path) { items.append(path) } else { report.leftLocked += 1 }
        }
        guard !items.isEmpty else { return report }

        let session = try source.openSession()
        var secrets = try source.secrets(items, session: session)
        defer {
            for path in secrets.keys { secrets[path]!.value.withUnsafeMutableBytes { secureZero($0) } }
        }
        let secret = try applicationSecret(for: id, dataDirectory: options.dataDirectory)
        let existing = try readKeyring(file)
        var keyring: PortalKeyring
        do {
            keyring = try PortalKeyring(contents: existing, secret: secret)
        } catch {
            throw Failure("\(file): \(error.description)")
        }
        var moved: [(path: String, item: PortalKeyring.Item)] = []
        defer { for index in moved.indices { moved[index].item.secret.withUnsafeMutableBytes { secureZero($0) } } }
        for path in items {
            guard let value = secrets[path]?.value else { continue }
            let properties = try source.allProperties(path, "org.freedesktop.Secret.Item")
            let now = UInt64(max(0, time(nil)))
            let item = PortalKeyring.Item(
                attributes: properties["Attributes"]?.unwrapped.stringDictionary ?? [:],
                label: properties["Label"]?.unwrapped.string ?? "",
                created: properties["Created"]?.unwrapped.uint64 ?? now,
                modified: properties["Modified"]?.unwrapped.uint64 ?? now, secret: value)
            do {
                try keyring.replace(with: item)
            } catch {
                throw Failure("\(file): \(error.description)")
            }
            moved.append((path, item))
        }
        // The application may have started meanwhile: its libsecret would write over the file.
        try refuseWhileRunning(id)
        try write(keyring, to: file)

        // Read back, with the secret, before anything leaves the provider.
        do {
            let written = try PortalKeyring(contents: try readKeyring(file), secret: secret).items()
            for (_, item) in moved
            where !written.contains(where: { $0.attributes == item.attributes && $0.secret == item.secret }) {
                throw Failure("\(file) does not hold \"\(item.label)\" after the write: nothing was deleted")
            }
        } catch let failure as Failure {
            throw failure
        } catch {
            throw Failure("\(file) could not be read back: \(error)")
        }
        for (path, item) in moved {
            report.moved.append(item.label)
            if !options.keepsOriginals, !(try source.delete(path)) { report.notDeleted += 1 }
        }
        return report
    }

    /// A Flatpak application ID as a path element can hold it: D-Bus name characters only.
    static func isApplicationID(_ id: String) -> Bool {
        let bytes = Array(id.utf8)
        return !bytes.isEmpty && bytes.count <= 255 && id != "." && id != ".."
            && bytes.allSatisfy {
                $0.isASCIIAlphanumeric || $0 == UInt8(ascii: "_") || $0 == UInt8(ascii: "-") || $0 == UInt8(ascii: ".")
            }
    }

    /// Where Flatpak keeps the application's data: its `XDG_DATA_HOME` inside the sandbox.
    static func defaultKeyringFile(for id: String) throws(Failure) -> String {
        guard let home = ProcessInfo.processInfo.environment["HOME"], home.hasPrefix("/") else {
            throw Failure("HOME is not set: name the keyring file with --keyring-file")
        }
        return home + "/.var/app/\(id)/data/keyrings/default.keyring"
    }

    /// Refuses while a process of this user runs as the application (its root's `/.flatpak-info`).
    static func refuseWhileRunning(_ id: String) throws(Failure) {
        guard let entries = try? FileManager.default.contentsOfDirectory(atPath: "/proc") else { return }
        let ownUID = getuid()
        for entry in entries where entry.allSatisfy(\.isNumber) {
            var status = stat()
            guard stat("/proc/" + entry, &status) == 0, status.st_uid == ownUID,
                let info = try? String(contentsOfFile: "/proc/\(entry)/root/.flatpak-info", encoding: .utf8),
                PinnedProcess.flatpakApplicationID(inInfo: info) == id
            else { continue }
            throw Failure("\(id) is running (pid \(entry)): quit it first, since it would write its keyring over ours")
        }
    }

    /// The portal's secret for `id`, from the store the Secret Service's `default` alias names.
    private static func applicationSecret(for id: String, dataDirectory: String) throws(Failure) -> SecretBytes {
        let store = Aliases(file: dataDirectory + "/" + SecretServiceRegistry.aliasesFileName).storeName(for: "default")
        guard let store else { throw Failure("the Secret Service's default alias names no collection") }
        let collection = SecretCollection(name: store, storePath: dataDirectory + "/" + store)
        defer { collection.close() }
        do throws(SecretServiceError) {
            guard let service = try collection.openedService() else {
                throw SecretServiceError(.failed, "it lives in memory")
            }
            do {
                return try service.applicationSecret(for: id)
            } catch {
                throw SecretServiceError(error)
            }
        } catch {
            throw Failure(
                "the portal's secret for \(id) could not be derived from the store \(store): \(error.message)")
        }
    }

    /// The keyring file's bytes; nil when there is none. A symbolic link, a file of another
    /// user's or anything but a regular file is refused.
    private static func readKeyring(_ file: String) throws(Failure) -> [UInt8]? {
        let descriptor = open(file, O_RDONLY | O_CLOEXEC | O_NOFOLLOW)
        if descriptor < 0 {
            if errno == ENOENT { return nil }
            throw Failure("\(file) cannot be opened (\(String(cString: strerror(errno)))): a symbolic link is refused")
        }
        defer { close(descriptor) }
        var status = stat()
        guard fstat(descriptor, &status) == 0, status.st_mode & S_IFMT == S_IFREG, status.st_uid == getuid() else {
            throw Failure("\(file) is not a regular file of this user's")
        }
        return readToEnd(descriptor, atMost: 64 << 20)
    }

    /// Replaces the file atomically: a private temporary beside it, synced, renamed over it.
    private static func write(_ keyring: PortalKeyring, to file: String) throws(Failure) {
        let directory = URL(fileURLWithPath: file).deletingLastPathComponent().path
        do {
            try createDirectories(directory)
        } catch {
            throw Failure("\(directory) could not be created: \(error)")
        }
        let bytes: [UInt8]
        do {
            bytes = try keyring.serialized(now: UInt64(max(0, time(nil))))
        } catch {
            throw Failure(error.description)
        }
        let temporary = directory + "/.default.keyring.tpm-keychain-\(getpid())"
        let descriptor = open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0o600)
        guard descriptor >= 0 else {
            throw Failure("\(temporary) could not be created: \(String(cString: strerror(errno)))")
        }
        var written = false
        defer { if !written { unlink(temporary) } }
        do {
            try writeAll(descriptor, bytes)
        } catch {
            close(descriptor)
            throw Failure("\(temporary) could not be written: \(error)")
        }
        let synced = fsync(descriptor) == 0
        close(descriptor)
        guard synced, rename(temporary, file) == 0 else {
            throw Failure("\(file) could not be replaced: \(String(cString: strerror(errno)))")
        }
        written = true
        let directoryDescriptor = open(directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        if directoryDescriptor >= 0 {
            fsync(directoryDescriptor)
            close(directoryDescriptor)
        }
    }
}

extension UInt8 {
    fileprivate var isASCIIAlphanumeric: Bool {
        (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(self) || (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(self)
            || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(self)
    }
}
