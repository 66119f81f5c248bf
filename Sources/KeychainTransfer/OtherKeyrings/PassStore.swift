import Dispatch
import FoundationEssentials
import KeychainService
import KeychainVocabulary
import SystemCalls
import WireFormat

#if canImport(Glibc)
import Glibc
#endif

/// Reads a `pass` store (passwordstore.org): every `*.gpg` file under its directory, decrypted
/// by `gpg`, becomes one generic password.
///
/// - Entries: files whose name ends in `.gpg`, found by walking the directory; directories and
///   files whose name starts with a dot (`.git`, `.extensions`, `.gpg-id`) are not read, as
///   `pass ls` does not list them. A symbolic link is not followed: to a directory it is passed
///   over, as an entry it is skipped with its reason (a planted link must not import a file from
///   elsewhere). Entries are read in the byte order of their relative paths.
/// - Each is opened here and handed to `gpg --quiet --batch --yes --decrypt` on standard input,
///   only when its file is at most ``maximumEntryFileSize`` bytes; at most an item's size of
///   plaintext is read. gpg asks for the key's passphrase through its agent's pinentry as `pass`
///   would. Nothing in the store is written.
/// - The item: service and label = the entry's name (its path relative to the store without
///   `.gpg`, such as `email/work`); account = `x` from the first line, after the first line,
///   of the form `login: x`, `username: x` or `user: x` (key in any case, `x` trimmed), else
///   empty; value = the decrypted text without its final newline: the password alone for a
///   one-line entry, the whole text, as `pass show` prints it, for a longer one. Kind `.string`,
///   or `.data` for an entry that is not UTF-8. Accessibility `whenUnlocked`.
///
/// - Important: apart from the user name of a `login:` line, nothing of an entry's text
///   becomes an attribute, and a multi-line entry's value is its whole text: `pass` users keep
///   recovery codes, PINs and security answers on the other lines, and attributes, unlike the
///   value, are opened for any listing and printed by the tools.
package enum PassStore {
    package typealias Report = ForeignImportReport

    /// Reads every entry of the store at `directory`.
    ///
    /// An entry gpg cannot decrypt (no secret key, a wrong passphrase, a damaged file) is
    /// skipped, its reason giving gpg's last line of diagnostics; so is an empty entry.
    ///
    /// - Parameters:
    ///   - gpg: the program to run: a path, or a name looked up in `PATH` (`environment`'s
    ///     when it has one, else this process's).
    ///   - environment: gpg's whole environment (for `GNUPGHOME`, `GPG_TTY`); nil for this
    ///     process's.
    ///   - progress: called with (0, total) before the first decryption and (done, total)
    ///     after each.
    /// - Throws: ``ForeignImportError``: `.unreadableSource` when `directory` is not a
    ///   directory or a directory in it cannot be listed; `.toolUnavailable` when gpg cannot
    ///   be found or started.
    package static func items(
        directory: String, gpg: String = "gpg", environment: [String: String]? = nil,
        progress: (Int, Int) -> Void = { _, _ in }
    ) throws(ForeignImportError) -> Report {
        var root = directory
        while root.count > 1, root.hasSuffix("/") { root.removeLast() }
        var status = stat()
        guard stat(root, &status) == 0 else {
            let reason = String(cString: strerror(errno))
            throw ForeignImportError(.unreadableSource, "cannot read the pass store \(directory): \(reason)")
        }
        guard status.st_mode & S_IFMT == S_IFDIR else {
            throw ForeignImportError(.unreadableSource, "the pass store \(directory) is not a directory")
        }
        let program = try executable(gpg, environment: environment)
        let entries = try entryPaths(in: root)

        var report = Report()
        progress(0, entries.count)
        for (offset, relativePath) in entries.enumerated() {
            let name = String(relativePath.dropLast(".gpg".count))
            switch try decrypt(relativePath, in: root, gpg: program, environment: environment) {
            case .failed(let reason):
                report.skipped.append(.init(row: offset + 1, reason: "\(name): \(reason)"))
            case .plaintext(var text):
                defer { erase(&text) }
                if let entryItem = Self.item(named: name, text: text) {
                    report.items.append(entryItem)
                } else {
                    report.skipped.append(.init(row: offset + 1, reason: "\(name): the entry is empty"))
                }
            }
            progress(offset + 1, entries.count)
        }
        return report
    }

    /// The item for entry `name` whose decryption is `text`; nil for an empty entry.
    static func item(named name: String, text: [UInt8]) -> TransferItem? {
        var value = text
        defer { erase(&value) }
        if value.last == UInt8(ascii: "\n") { value.removeLast() }
        guard !value.isEmpty else { return nil }
        var attributes = AttributeList()
        attributes.setString(name, for: AttributeTag.service)
        attributes.setString(name, for: AttributeTag.label)
        let lines = value.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false)
        attributes.setString(account(in: lines.dropFirst()), for: AttributeTag.account)
        let kind: ValueKind = isUTF8(value) ? .string : .data
        return TransferItem(
            itemClass: .genericPassword, accessibility: .whenUnlocked, attributes: attributes,
            value: ItemValue(kind: kind, bytes: Array(value)))
    }

    /// The value of the first `login:`, `username:` or `user:` line, trimmed; empty when none.
    static func account(in lines: ArraySlice<ArraySlice<UInt8>>) -> String {
        for line in lines {
            guard let colon = line.firstIndex(of: UInt8(ascii: ":")),
                let key = String(validating: line[..<colon], as: UTF8.self),
                ["login", "username", "user"].contains(key.trimmingWhitespace().lowercased()),
                let value = String(validating: line[line.index(after: colon)...], as: UTF8.self)
            else { continue }
            return value.trimmingWhitespace()
        }
        return ""
    }

    // MARK: The store's files

    /// The entries' paths relative to `root`, `.gpg` included, in byte order.
    private static func entryPaths(in root: String) throws(ForeignImportError) -> [String] {
        var found: [String] = []
        var pending = [""]
        while let relative = pending.popLast() {
            let absolute = relative.isEmpty ? root : root + "/" + relative
            let names: [String]
            do {
                names = try FileManager.default.contentsOfDirectory(atPath: absolute)
            } catch {
                throw ForeignImportError(
                    .unreadableSource, "cannot list \(absolute) in the pass store: \(error)")
            }
            for name in names where !name.hasPrefix(".") {
                let path = relative.isEmpty ? name : relative + "/" + name
                let full = root + "/" + path
                var status = stat()
                guard lstat(full, &status) == 0 else { continue }
                switch status.st_mode & S_IFMT {
                case S_IFDIR:
                    pending.append(path)
                case S_IFREG where name.hasSuffix(".gpg"):
                    found.append(path)
                case S_IFLNK where name.hasSuffix(".gpg"):
                    // Listed, so that the report says why it was not read (decrypt refuses it).
                    found.append(path)
                default:
                    continue
                }
            }
        }
        return found.sorted { $0.utf8.lexicographicallyPrecedes($1.utf8) }
    }

    /// `gpg` itself when it names a path, else the first executable of that name in `PATH`.
    private static func executable(
        _ gpg: String, environment: [String: String]?
    ) throws(ForeignImportError)
        -> String
    {
        if gpg.contains("/") {
            guard FileManager.default.isExecutableFile(atPath: gpg) else {
                throw ForeignImportError(.toolUnavailable, "\(gpg) is not an executable file")
            }
            return gpg
        }
        let searchPath =
            environment?["PATH"] ?? ProcessInfo.processInfo.environment["PATH"] ?? "/usr/local/bin:/usr/bin:/bin"
        for directory in searchPath.split(separator: ":") where directory.hasPrefix("/") {
            let candidate = String(directory) + "/" + gpg
            if FileManager.default.isExecutableFile(atPath: candidate) { return candidate }
        }
        throw ForeignImportError(
            .toolUnavailable,
            "\(gpg) is not in PATH: install GnuPG (Debian and Ubuntu: apt install gnupg) or give the path of gpg")
    }

    // MARK: gpg

    enum Decryption {
        case plaintext([UInt8])
        /// Why not, for the report: gpg's exit status and its last line of diagnostics.
        case failed(String)
    }

    /// The most bytes an entry's file may have: an item's value, with room for OpenPGP's packets
    /// and ASCII armour around it. Larger files are not handed to gpg at all.
    package static let maximumEntryFileSize = 2 * ItemValue.maximumSize + (1 << 20)

    /// Runs gpg on the entry `relativePath` of the store at `root`. The entry is opened here,
    /// without following a link (an entry is a file of the store, not a way to read a file
    /// elsewhere), its size checked, and handed to gpg on standard input, so that what is checked
    /// is what gpg reads. Standard output (the plaintext) is read on this thread, at most one byte
    /// past an item's limit, gpg then stopped; standard error on another, so that neither pipe can
    /// fill and block gpg.
    private static func decrypt(
        _ relativePath: String, in root: String, gpg: String, environment: [String: String]?
    )
        throws(ForeignImportError) -> Decryption
    {
        let file = root + "/" + relativePath
        let descriptor = open(file, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)
        guard descriptor >= 0 else {
            return .failed(
                errno == ELOOP
                    ? "a symbolic link, not read: an entry must be a file of the store"
                    : "cannot open it: \(String(cString: strerror(errno)))")
        }
        defer { closeDescriptor(descriptor) }
        var status = stat()
        guard fstat(descriptor, &status) == 0, status.st_mode & S_IFMT == S_IFREG else {
            return .failed("not a regular file, not read")
        }
        guard Int(status.st_size) <= maximumEntryFileSize else {
            return .failed(
                "\(status.st_size) bytes, over the \(maximumEntryFileSize) an entry may have; not decrypted")
        }
        let output: (read: Int32, write: Int32)
        let errors: (read: Int32, write: Int32)
        let pid: pid_t
        do {
            output = try makeCloseOnExecPipe()
            do {
                errors = try makeCloseOnExecPipe()
            } catch {
                closeDescriptor(output.read)
                closeDescriptor(output.write)
                throw error
            }
            do {
                pid = try ChildProcess.spawn(
                    executablePath: gpg, arguments: ["--quiet", "--batch", "--yes", "--decrypt"],
                    environment: environment.map { $0.map { "\($0.key)=\($0.value)" } },
                    standardInput: .descriptor(descriptor), standardOutput: .descriptor(output.write),
                    standardError: .descriptor(errors.write))
            } catch {
                for end in [output.read, output.write, errors.read, errors.write] { closeDescriptor(end) }
                throw error
            }
        } catch {
            throw ForeignImportError(.toolUnavailable, "cannot run \(gpg): \(error)")
        }
        // Our copies of the write ends must go: if we kept them, the pipes would never see EOF.
        closeDescriptor(output.write)
        closeDescriptor(errors.write)

        let errorDescriptor = errors.read
        let diagnostics = Locked<[UInt8]>([])
        let reader = DispatchGroup()
        DispatchQueue.global().async(group: reader) { PassStore.drain(errorDescriptor, into: diagnostics) }
        var plaintext = readToEnd(output.read, atMost: ItemValue.maximumSize + 1)
        if plaintext.count > ItemValue.maximumSize {
            // A small file can decompress to gigabytes: stop gpg rather than read on.
            _ = kill(pid, SIGTERM)
        }
        closeDescriptor(output.read)
        reader.wait()
        closeDescriptor(errors.read)
        let termination = try? ChildProcess.waitForTermination(pid)

        guard plaintext.count <= ItemValue.maximumSize else {
            erase(&plaintext)
            return .failed("its decrypted text is over \(ItemValue.maximumSize) bytes, more than an item holds")
        }
        guard termination == .exited(0) else {
            erase(&plaintext)
            let how =
                switch termination {
                case .exited(let code): "exit status \(code)"
                case .signaled(let signal): "signal \(signal)"
                case nil: "its end unknown"
                }
            let diagnosis = diagnostics.withLock { PassStore.lastLine(of: $0) }
            return .failed("gpg could not decrypt it (\(how))" + (diagnosis.isEmpty ? "" : ": \(diagnosis)"))
        }
        return .plaintext(plaintext)
    }

    /// Reads `descriptor` to its end into `collected`, keeping the last 64 KiB (gpg's
    /// diagnostics are a few lines; only the last one is used).
    private static func drain(_ descriptor: Int32, into collected: Locked<[UInt8]>) {
        var buffer = [UInt8](repeating: 0, count: 4096)
        while true {
            let count = buffer.withUnsafeMutableBytes { Glibc.read(descriptor, $0.baseAddress, $0.count) }
            if count > 0 {
                collected.withLock { bytes in
                    bytes.append(contentsOf: buffer[0..<count])
                    if bytes.count > 65536 { bytes.removeFirst(bytes.count - 65536) }
                }
            } else if count < 0, errno == EINTR {
                continue
            } else {
                return
            }
        }
    }

    /// The last non-empty line of `bytes`, trimmed and at most 300 characters.
    private static func lastLine(of bytes: [UInt8]) -> String {
        let text = String(decoding: bytes, as: UTF8.self)
        let line =
            text.split(whereSeparator: \.isNewline).last { !$0.allSatisfy(\.isWhitespace) }
            .map { $0.trimmingWhitespace() } ?? ""
        return line.count > 300 ? String(line.prefix(297)) + "..." : line
    }

    // MARK: Bytes

    static func isUTF8(_ bytes: [UInt8]) -> Bool {
        var decoder = UTF8()
        var iterator = bytes.makeIterator()
        while true {
            switch decoder.decode(&iterator) {
            case .scalarValue: continue
            case .emptyInput: return true
            case .error: return false
            }
        }
    }
}
