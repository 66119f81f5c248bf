import FoundationEssentials
import ToolSupport

/// The credential attributes this helper uses, read from git's description. Everything else git
/// may send (`capability[]`, `wwwauth[]`, `authtype`, `credential`, `state[]`, `url`, attributes
/// of later versions) is ignored, as gitcredentials(7) asks of helpers.
struct GitCredential {
    /// `protocol`: https, http, smtp, cert, ...
    var protocolName: [UInt8]?
    /// `host` without its port.
    var server: [UInt8]?
    /// The port `host` names after its last colon; nil when it names none. Part of the host:
    /// `example.com` and `example.com:8443` are different hosts to git.
    var port: UInt16?
    /// `path`, only when git sends it (credential.useHttpPath, or a certificate's file).
    var path: [UInt8]?
    var username: [UInt8]?
    var password: [UInt8]?
    /// `password_expiry_utc`: seconds since 1970 after which the password must not be used.
    var passwordExpiry: Int64?
    var oauthRefreshToken: [UInt8]?

    init(_ message: CredentialMessage) {
        protocolName = message["protocol"]
        if let host = message["host"] {
            (server, port) = Self.split(host: host)
        }
        // An empty path is no path: git omits the attribute when there is none.
        path = message["path"].flatMap { $0.isEmpty ? nil : $0 }
        username = message["username"]
        password = message["password"]
        passwordExpiry = message["password_expiry_utc"].flatMap(Self.timestamp)
        oauthRefreshToken = message["oauth_refresh_token"]
    }

    /// Whether a password with this `password_expiry_utc` has expired: git (credential.c)
    /// drops a password whose expiry is before the current second.
    static func isPast(_ expiry: Int64?, now: Date = Date()) -> Bool {
        guard let expiry else { return false }
        return expiry < Int64(now.timeIntervalSince1970.rounded(.down))
    }

    /// `example.com:8443` is server `example.com`, port 8443; `[::1]:8443` is `[::1]`, 8443.
    /// A host whose tail is not a port from 1 to 65535 (no colon, `[::1]`, `host:0`) is kept whole.
    static func split(host: [UInt8]) -> (server: [UInt8], port: UInt16?) {
        guard let colon = host.lastIndex(of: UInt8(ascii: ":")) else { return (host, nil) }
        let name = host[..<colon]
        let digits = host[(colon + 1)...]
        // A bare IPv6 address has colons of its own; git brackets one that has a port.
        guard !name.contains(UInt8(ascii: ":")) || name.last == UInt8(ascii: "]") else { return (host, nil) }
        guard (1...5).contains(digits.count),
            digits.allSatisfy({ (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) }),
            let port = UInt16(String(decoding: digits, as: UTF8.self)), port != 0, !name.isEmpty
        else {
            return (host, nil)
        }
        return (Array(name), port)
    }

    /// git's reading of `password_expiry_utc` (credential.c): decimal seconds; 0, or a value
    /// that does not parse, means no expiry.
    static func timestamp(_ bytes: [UInt8]) -> Int64? {
        guard !bytes.isEmpty, bytes.allSatisfy({ (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) }),
            let value = Int64(String(decoding: bytes, as: UTF8.self)), value > 0
        else { return nil }
        return value
    }
}

/// What an item's secret holds: the password and what goes with it, as JSON (the item's value,
/// kind JSON), so that nothing secret or short-lived is an attribute. Keys are git's attribute
/// names; unknown keys are ignored, so later versions can add some.
struct StoredSecret: Codable, Equatable {
    var password: String
    var passwordExpiry: Int64?
    var oauthRefreshToken: String?

    enum CodingKeys: String, CodingKey {
        case password
        case passwordExpiry = "password_expiry_utc"
        case oauthRefreshToken = "oauth_refresh_token"
    }

    /// - Throws: ``HelperFailure`` (data error) when a value is not UTF-8 text, which JSON
    ///   cannot carry; nothing is stored then.
    init(_ credential: GitCredential) throws(HelperFailure) {
        for (name, value) in [
            ("username", credential.username), ("password", credential.password),
            ("oauth_refresh_token", credential.oauthRefreshToken),
        ] {
            if let value, !CredentialMessage.isSafeValue(value) {
                throw HelperFailure(
                    ExitStatus.dataError,
                    "the \(name) contains a carriage return or NUL, which git would misread when it is given back; it was not stored"
                )
            }
        }
        guard let password = credential.password.flatMap({ String(validating: $0, as: UTF8.self) }) else {
            throw HelperFailure(ExitStatus.dataError, "the password is not UTF-8 text; it was not stored")
        }
        self.password = password
        passwordExpiry = credential.passwordExpiry
        if let token = credential.oauthRefreshToken {
            guard let text = String(validating: token, as: UTF8.self) else {
                throw HelperFailure(
                    ExitStatus.dataError, "the oauth_refresh_token is not UTF-8 text; the credential was not stored")
            }
            oauthRefreshToken = text
        }
    }

    init(decoding bytes: [UInt8]) throws {
        self = try JSONDecoder().decode(StoredSecret.self, from: Data(bytes))
    }

    var encoded: [UInt8] {
        get throws { Array(try JSONEncoder().encode(self)) }
    }
}
