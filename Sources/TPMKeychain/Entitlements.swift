import FoundationEssentials

/// An app's keychain entitlements, read from the Xcode `.entitlements` property list the iOS
/// project already has, so that ported code and its tests see the access groups iOS would give
/// them without a line of configuration code (``KeychainEnvironment`` reads it when code sets
/// nothing).
///
/// Where the file is: `TPM_KEYCHAIN_ENTITLEMENTS` (a path), else `<executable>.entitlements`
/// beside the executable, else the only `*.entitlements` file there. Xcode's build variables in
/// its values are expanded: `$(AppIdentifierPrefix)` and `$(TeamIdentifierPrefix)` to the team
/// identifier and a dot (``KeychainEnvironment/teamIdentifier``, `TPM_KEYCHAIN_TEAM_ID`),
/// `$(CFBundleIdentifier)` and `$(PRODUCT_BUNDLE_IDENTIFIER)` to the bundle identifier
/// (`TPM_KEYCHAIN_BUNDLE_ID`, else the process name).
public struct Entitlements: Sendable, Equatable {
    /// The environment variable naming the file.
    public static let pathVariable = "TPM_KEYCHAIN_ENTITLEMENTS"

    /// `application-identifier`, expanded; nil when the file has none.
    public var applicationIdentifier: String?
    /// `keychain-access-groups`, expanded, in the file's order.
    public var keychainAccessGroups: [String]

    /// The groups a process with these entitlements may use, in iOS's order: the keychain access
    /// groups, then the application identifier; the first is where new items go.
    public var accessGroups: [String] {
        var groups = keychainAccessGroups
        if let applicationIdentifier, !groups.contains(applicationIdentifier) { groups.append(applicationIdentifier) }
        return groups
    }

    /// Reads and expands an entitlements property list.
    ///
    /// - Throws: ``KeychainError`` `.invalidParameter` for a file that is not a property list of
    ///   entitlements, a value of the wrong type, or a build variable that cannot be expanded
    ///   (`$(AppIdentifierPrefix)` without a team identifier, say): the message names it.
    public init(contentsOf path: String, teamIdentifier: String?, bundleIdentifier: String) throws(KeychainError) {
        let file: File
        do {
            file = try PropertyListDecoder().decode(File.self, from: try Data(contentsOf: URL(fileURLWithPath: path)))
        } catch DecodingError.typeMismatch(_, let context) {
            switch context.codingPath.first.flatMap({ File.CodingKeys(stringValue: $0.stringValue) }) {
            case .applicationIdentifier:
                throw KeychainError(.invalidParameter, "\(path): application-identifier is not a string")
            case .keychainAccessGroups:
                throw KeychainError(.invalidParameter, "\(path): keychain-access-groups is not an array of strings")
            case nil:
                throw KeychainError(.invalidParameter, "\(path) is not a dictionary of entitlements")
            }
        } catch {
            throw KeychainError(.invalidParameter, "\(path) is not a readable property list", underlying: error)
        }
        func expand(_ value: String, _ key: String) throws(KeychainError) -> String {
            var text = value
            for prefix in ["$(AppIdentifierPrefix)", "$(TeamIdentifierPrefix)"] where text.contains(prefix) {
                guard let teamIdentifier, !teamIdentifier.isEmpty else {
                    throw KeychainError(
                        .invalidParameter,
                        "\(path): \(key) uses \(prefix) and no team identifier is set (KeychainEnvironment.teamIdentifier or TPM_KEYCHAIN_TEAM_ID)"
                    )
                }
                text = text.replacing(prefix, with: teamIdentifier + ".")
            }
            for variable in ["$(CFBundleIdentifier)", "$(PRODUCT_BUNDLE_IDENTIFIER)"] {
                text = text.replacing(variable, with: bundleIdentifier)
            }
            if let start = text.firstRange(of: "$(") {
                throw KeychainError(
                    .invalidParameter, "\(path): \(key) uses \(text[start.lowerBound...]), which is not expanded here")
            }
            return text
        }
        if let identifier = file.applicationIdentifier {
            applicationIdentifier = try expand(identifier, "application-identifier")
        }
        var groups: [String] = []
        for group in file.keychainAccessGroups ?? [] { groups.append(try expand(group, "keychain-access-groups")) }
        keychainAccessGroups = groups
    }

    /// The keys read from the file; the others an app's entitlements hold are ignored.
    private struct File: Decodable {
        var applicationIdentifier: String?
        var keychainAccessGroups: [String]?

        enum CodingKeys: String, CodingKey {
            case applicationIdentifier = "application-identifier"
            case keychainAccessGroups = "keychain-access-groups"
        }
    }

    /// The file this process's environment or executable names, when there is one.
    static func discoveredPath() -> String? {
        let environment = ProcessInfo.processInfo.environment
        if let path = environment[pathVariable], !path.isEmpty { return path }
        guard let executable = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe") else {
            return nil
        }
        let directory = URL(fileURLWithPath: executable).deletingLastPathComponent().path
        let named = executable + ".entitlements"
        if FileManager.default.fileExists(atPath: named) { return named }
        let candidates = ((try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []).filter {
            $0.hasSuffix(".entitlements")
        }
        return candidates.count == 1 ? directory + "/" + candidates[0] : nil
    }
}
