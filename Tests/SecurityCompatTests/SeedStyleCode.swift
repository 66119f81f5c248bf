import LocalAuthenticationCompat
// Keychain code written the way iOS apps write it (the call patterns of the seed documents),
// compiled here against SecurityCompat and LocalAuthenticationCompat: only the two import lines
// differ from what an iOS target would have.
import SecurityCompat

enum SessionStorageError: Error, Equatable {
    case unexpectedStatus(OSStatus)
    case notFound
}

/// Session storage with `[String: Any]` queries: add, then update on errSecDuplicateItem.
struct SessionStorage {
    let service: String

    func save(_ data: Data, for key: String) throws {
        let query: [String: Any] = [
            kSecClass as String: kSecClassGenericPassword,
            kSecAttrService as String: service,
            kSecAttrAccount as String: key,
            kSecValueData as String: data,
            kSecAttrAccessible as String: kSecAttrAccessibleWhenUnlockedThisDeviceOnly,
        ]
        let status = SecItemAdd(query as CFDictionary, nil)
        if status == errSecDuplicateItem {
            let updateQuery: [String: Any] = [
                kSecClass as String: kSecClassGenericPassword,
                kSecAttrService as String: service,
                kSecAttrAccount as String: key,
            ]
            let attributes: [String: Any] = [kSecValueData as String: data]
            let updateStatus = SecItemUpdate(updateQuery as CFDictionary, attributes as CFDictionary)
            guard updateStatus == errSecSuccess else { throw SessionStorageError.unexpectedStatus(updateStatus) }
        } else if status != errSecSuccess {
            throw SessionStorageError.unexpectedStatus(status)
        }
    }

    func load(_ key: String) throws -> Data {
        let query: [String: Any] = [
            kSecClass as String: kSecClassGenericPassword,
            kSecAttrService as String: service,
            kSecAttrAccount as String: key,
            kSecReturnData as String: true,
            kSecMatchLimit as String: kSecMatchLimitOne,
        ]
        var result: AnyObject?
        let status = SecItemCopyMatching(query as CFDictionary, &result)
        guard status == errSecSuccess else {
            if status == errSecItemNotFound { throw SessionStorageError.notFound }
            throw SessionStorageError.unexpectedStatus(status)
        }
        guard let data = result as? Data else { throw SessionStorageError.unexpectedStatus(errSecDecode) }
        return data
    }

    func delete(_ key: String) throws {
        let query: [String: Any] = [
            kSecClass as String: kSecClassGenericPassword,
            kSecAttrService as String: service,
            kSecAttrAccount as String: key,
        ]
        let status = SecItemDelete(query as CFDictionary)
        guard status == errSecSuccess || status == errSecItemNotFound else {
            throw SessionStorageError.unexpectedStatus(status)
        }
    }

    func exists(_ key: String) -> Bool {
        let query: [String: Any] = [
            kSecClass as String: kSecClassGenericPassword,
            kSecAttrService as String: service,
            kSecAttrAccount as String: key,
            kSecReturnData as String: false,
        ]
        return SecItemCopyMatching(query as CFDictionary, nil) == errSecSuccess
    }
}

/// A token helper with `[CFString: Any]` queries: delete-then-add saves, and logout clears the service.
final class TokenHelper {
    static let service = "com.example.lifekb.tokens"

    @discardableResult
    func save(_ token: String, account: String) -> Bool {
        let data = Data(token.utf8)
        let query =
            [
                kSecClass: kSecClassGenericPassword,
                kSecAttrService: Self.service,
                kSecAttrAccount: account,
                kSecValueData: data,
            ] as [CFString: Any] as CFDictionary
        SecItemDelete(query)
        return SecItemAdd(query, nil) == noErr
    }

    func read(account: String) -> String? {
        let query =
            [
                kSecClass: kSecClassGenericPassword,
                kSecAttrService: Self.service,
                kSecAttrAccount: account,
                kSecReturnData: kCFBooleanTrue!,
                kSecMatchLimit: kSecMatchLimitOne,
            ] as [CFString: Any] as CFDictionary
        var item: CFTypeRef?
        let status = SecItemCopyMatching(query, &item)
        guard status == errSecSuccess, let data = item as? Data else { return nil }
        return String(data: data, encoding: .utf8)
    }

    /// Logout: every token of the service goes.
    func logout() -> OSStatus {
        let query = [kSecClass: kSecClassGenericPassword, kSecAttrService: Self.service] as [CFString: Any]
        return SecItemDelete(query as CFDictionary)
    }
}

/// A typed wrapper: Codable values, an access group, attributes with the data.
struct TypedKeychain {
    let service: String
    let accessGroup: String?

    private func baseQuery(_ key: String) -> [String: Any] {
        var query: [String: Any] = [
            kSecClass as String: kSecClassGenericPassword, kSecAttrService as String: service,
            kSecAttrAccount as String: key,
        ]
        if let accessGroup { query[kSecAttrAccessGroup as String] = accessGroup }
        return query
    }

    func set<Value: Encodable>(_ value: Value, for key: String) throws {
        let data = try JSONEncoder().encode(value)
        var query = baseQuery(key)
        let status = SecItemCopyMatching(query as CFDictionary, nil)
        if status == errSecSuccess {
            let update = SecItemUpdate(query as CFDictionary, [kSecValueData as String: data] as CFDictionary)
            guard update == errSecSuccess else { throw SessionStorageError.unexpectedStatus(update) }
        } else {
            query[kSecValueData as String] = data
            let add = SecItemAdd(query as CFDictionary, nil)
            guard add == errSecSuccess else { throw SessionStorageError.unexpectedStatus(add) }
        }
    }

    func get<Value: Decodable>(_ key: String, as type: Value.Type) throws -> Value? {
        var query = baseQuery(key)
        query[kSecReturnData as String] = kCFBooleanTrue
        query[kSecMatchLimit as String] = kSecMatchLimitOne
        query[kSecReturnAttributes as String] = kCFBooleanTrue
        var queryResult: AnyObject?
        let status = SecItemCopyMatching(query as CFDictionary, &queryResult)
        guard [errSecItemNotFound, errSecSuccess].contains(status) else {
            throw SessionStorageError.unexpectedStatus(status)
        }
        guard let result = queryResult as? [String: Any], let data = result[kSecValueData as String] as? Data else {
            return nil
        }
        return try JSONDecoder().decode(type, from: data)
    }
}

/// Biometry-protected storage: saved with SecAccessControlCreateWithFlags, loaded with an
/// LAContext from a background queue into a continuation.
struct BiometricSessionStorage {
    static let service = "com.example.privacyboost.biometric"

    enum Failure: Error, Equatable {
        case accessControl
        case status(OSStatus)
    }

    func save(_ data: Data, key: String) throws {
        var error: Unmanaged<CFError>?
        guard
            let accessControl = SecAccessControlCreateWithFlags(
                kCFAllocatorDefault, kSecAttrAccessibleWhenUnlockedThisDeviceOnly,
                .biometryCurrentSet, &error)
        else {
            throw Failure.accessControl
        }
        let query: [String: Any] = [
            kSecClass as String: kSecClassGenericPassword,
            kSecAttrService as String: Self.service,
            kSecAttrAccount as String: key,
            kSecValueData as String: data,
            kSecAttrAccessControl as String: accessControl,
        ]
        SecItemDelete(query as CFDictionary)
        let status = SecItemAdd(query as CFDictionary, nil)
        guard status == errSecSuccess else { throw Failure.status(status) }
    }

    func load(key: String, reason: String) async throws -> Data {
        let context = LAContext()
        context.localizedReason = reason
        return try await withCheckedThrowingContinuation { continuation in
            DispatchQueue.global(qos: .userInitiated).async {
                let query: [String: Any] = [
                    kSecClass as String: kSecClassGenericPassword,
                    kSecAttrService as String: Self.service,
                    kSecAttrAccount as String: key,
                    kSecReturnData as String: true,
                    kSecUseAuthenticationContext as String: context,
                ]
                var result: AnyObject?
                let status = SecItemCopyMatching(query as CFDictionary, &result)
                if status == errSecSuccess, let data = result as? Data {
                    continuation.resume(returning: data)
                } else {
                    continuation.resume(throwing: Failure.status(status))
                }
            }
        }
    }
}

/// Biometric authentication helper: availability, type, and enrollment-change detection through
/// a stored domain state.
final class BiometricAuth {
    enum Kind: Equatable { case none, touchID, faceID, opticID }
    private var savedDomainState: Data?

    func availableKind() -> Kind {
        let context = LAContext()
        var error: NSError?
        guard context.canEvaluatePolicy(.deviceOwnerAuthenticationWithBiometrics, error: &error) else { return .none }
        switch context.biometryType {
        case .faceID: return .faceID
        case .touchID: return .touchID
        case .opticID: return .opticID
        case .none: return .none
        @unknown default: return .none
        }
    }

    /// nil on success, else why not.
    func authenticate(reason: String) async -> LAError.Code? {
        let context = LAContext()
        context.localizedFallbackTitle = "Use Passcode"
        do {
            _ = try await context.evaluatePolicy(.deviceOwnerAuthenticationWithBiometrics, localizedReason: reason)
            return nil
        } catch let error as LAError {
            switch error.code {
            case .userCancel, .appCancel, .systemCancel: return .userCancel
            default: return error.code
            }
        } catch {
            return .authenticationFailed
        }
    }

    /// Remembers the current enrollment.
    func rememberEnrollment() {
        let context = LAContext()
        var error: NSError?
        _ = context.canEvaluatePolicy(.deviceOwnerAuthenticationWithBiometrics, error: &error)
        savedDomainState = context.evaluatedPolicyDomainState
    }

    /// Whether the enrolled biometry changed since ``rememberEnrollment()``.
    func enrollmentChanged() -> Bool {
        let context = LAContext()
        var error: NSError?
        _ = context.canEvaluatePolicy(.deviceOwnerAuthenticationWithBiometrics, error: &error)
        return context.evaluatedPolicyDomainState != savedDomainState
    }
}
