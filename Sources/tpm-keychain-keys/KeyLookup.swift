import CommandLineSupport
import Foundation
import SecurityCompat
import TPMKeychain
import ToolSupport

/// Finding the one key a `key` verb names, and SecKey's errors as the tool's exit statuses.
enum KeyLookup {
    /// The SecItem query for the key items `name` names (private and public).
    static func query(_ name: KeyName) -> [CFString: Any] {
        var query: [CFString: Any] = [kSecClass: kSecClassKey, kSecAttrLabel: name.label]
        if let tag = name.tag { query[kSecAttrApplicationTag] = Data(tag.utf8) }
        return query
    }

    /// Every key `name` names, private keys first, from one query.
    static func find(_ name: KeyName) throws -> [(key: SecKey, isPrivate: Bool)] {
        var query = query(name)
        query[kSecReturnRef] = true
        query[kSecReturnAttributes] = true
        query[kSecMatchLimit] = kSecMatchLimitAll
        var result: CFTypeRef?
        let status = SecItemCopyMatching(query as CFDictionary, &result)
        if status == errSecItemNotFound { return [] }
        guard status == errSecSuccess else { throw failure(status, "The keychain could not be searched") }
        let found = ((result as? [[String: Any]]) ?? []).compactMap { item -> (key: SecKey, isPrivate: Bool)? in
            guard let key = item[kSecValueRef as String] as? SecKey else { return nil }
            return (key, (item[kSecAttrKeyClass as String] as? String) == kSecAttrKeyClassPrivate as String)
        }
        return found.filter(\.isPrivate) + found.filter { !$0.isPrivate }
    }

    /// The key `name` names: its private key, or its public key when the keychain has only that.
    ///
    /// - Throws: ``CommandFailure`` 44 when there is none, 64 when the label names several keys
    ///   and no tag tells them apart.
    static func one(_ name: KeyName) throws -> SecKey {
        let found = try find(name)
        let privateKeys = found.filter(\.isPrivate).count
        if privateKeys > 1 {
            throw CommandFailure(
                ExitStatus.usage,
                "\(privateKeys) keys are labelled \"\(name.label)\"\(name.tag == nil ? "" : " with that tag"); name one with --tag"
            )
        }
        guard let first = found.first else {
            throw CommandFailure(ExitStatus.itemNotFound, "No key labelled \"\(name.label)\" in the keychain")
        }
        return first.key
    }

    /// The key's TPM 2.0 Key File.
    static func keyFile(of key: SecKey) throws -> String {
        var error: Unmanaged<CFError>?
        guard let pem = SecKeyCopyTPMKeyFile(key, &error) else {
            throw failure(error, "The key cannot be written as a key file")
        }
        return pem as String
    }

    static func failure(_ error: Unmanaged<CFError>?, _ what: String) -> CommandFailure {
        guard let error = error?.takeRetainedValue() else { return CommandFailure(ExitStatus.software, what) }
        let code = OSStatus(error.code)
        if code == errSecIO || code == errSecNotAvailable { return failure(code, what) }
        return CommandFailure(status(OSStatus(error.code)), "\(what): \(error.localizedDescription)")
    }

    static func failure(_ status: OSStatus, _ what: String) -> CommandFailure {
        // errSecIO and errSecNotAvailable stand for several causes (a store this user may not
        // open, unsafe files, no TPM): the store's own error says which, and what to do.
        if status == errSecIO || status == errSecNotAvailable, let error = KeychainEnvironment.lastStoreError {
            return CommandFailure(ExitStatus.forKeychainError(error.code), "\(what): \(error.message)")
        }
        let message = SecCopyErrorMessageString(status, nil).map { $0 as String } ?? "OSStatus \(status)"
        return CommandFailure(self.status(status), "\(what): \(message)")
    }

    /// The exit status for a SecItem result code, as ``ExitStatus`` maps the keychain's errors.
    private static func status(_ status: OSStatus) -> Int32 {
        switch status {
        case errSecItemNotFound: ExitStatus.itemNotFound
        case errSecDuplicateItem: ExitStatus.duplicateItem
        case errSecParam: ExitStatus.usage
        case errSecDecode: ExitStatus.dataError
        case errSecNotAvailable: ExitStatus.unavailable
        case errSecInteractionNotAllowed, errSecAuthFailed, errSecUserCanceled, errSecMissingEntitlement:
            ExitStatus.permissionDenied
        default: ExitStatus.software
        }
    }
}

/// A file the tool writes a key file to: created with mode 0600, never over an existing file or
/// through a symbolic link, and removed again when what it was for fails.
final class KeyFileOutput {
    let path: String
    private let descriptor: Int32
    private var isOpen = true

    init(claiming path: String) throws {
        let descriptor = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else {
            let reason = String(cString: strerror(errno))
            throw CommandFailure(
                errno == EEXIST ? ExitStatus.usage : ExitStatus.ioError,
                "The key file \(path) cannot be created: \(reason)\(errno == EEXIST ? " (a key file is never overwritten)" : "")"
            )
        }
        self.path = path
        self.descriptor = descriptor
    }

    /// Writes `text`, flushes it to disk and closes the file.
    func write(_ text: String) throws {
        defer {
            close(descriptor)
            isOpen = false
        }
        let bytes = Array(text.utf8)
        var written = 0
        while written < bytes.count {
            let count = bytes[written...].withUnsafeBytes { Glibc.write(descriptor, $0.baseAddress, $0.count) }
            if count < 0, errno == EINTR { continue }
            guard count > 0 else {
                throw CommandFailure(
                    ExitStatus.ioError, "The key file \(path) could not be written: \(String(cString: strerror(errno)))"
                )
            }
            written += count
        }
        guard fsync(descriptor) == 0 else {
            throw CommandFailure(
                ExitStatus.ioError, "The key file \(path) could not be written: \(String(cString: strerror(errno)))")
        }
    }

    /// Removes the file (nothing was written, or what was is of no use).
    func abandon() {
        if isOpen { close(descriptor) }
        isOpen = false
        unlink(path)
    }
}
