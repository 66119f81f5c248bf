import DBus
import FoundationEssentials
import SystemCalls
import TPMKeychain
import WireFormat

#if canImport(Glibc)
import Glibc
#endif

/// The Secret portal's backend (`org.freedesktop.impl.portal.Secret` at
/// `/org/freedesktop/portal/desktop`, name `org.freedesktop.impl.portal.desktop.tpmkeychain`):
/// xdg-desktop-portal asks it, for a sandboxed application, for that application's secret, which
/// libsecret in the sandbox uses as the key of its own keyring file. The secret is derived in the
/// TPM from the application's ID (``ItemService/applicationSecret(for:)``) with the default
/// keychain's HMAC key, so each ID gets its own, always the same, and none while locked. Only the
/// portal frontend is served: the decision point's rules for this face name the owner of
/// `org.freedesktop.portal.Desktop` and nobody else, since the frontend is what vouches for an
/// application's ID (docs/SECURITY.md, "The Secret portal").
enum SecretPortalBackend {
    static let busName = "org.freedesktop.impl.portal.desktop.tpmkeychain"
    static let path = "/org/freedesktop/portal/desktop"
    static let interface = Introspection.portalInterface
    static let frontendName = "org.freedesktop.portal.Desktop"
    /// The version of the backend interface this implements.
    static let version: UInt32 = 1
    /// How long a write of the secret to the application's descriptor may wait.
    static let writeTimeout: Int32 = 5_000
}

extension SecretServiceRegistry {
    /// Answers a call to the portal backend's object.
    func handlePortal(_ call: BusMethodCall) -> BusReply {
        do throws(SecretServiceError) {
            let peer = try identify(call.sender)
            return .values(try routePortal(call, from: peer))
        } catch {
            return error.reply
        }
    }

    private func routePortal(_ call: BusMethodCall, from peer: BusPeer) throws(SecretServiceError) -> [BusValue] {
        switch (call.interface, call.member) {
        case ("org.freedesktop.DBus.Introspectable", "Introspect"):
            return [.string(Introspection.document(interfaces: [SecretPortalBackend.interface], children: []))]
        case ("org.freedesktop.DBus.Properties", "Get"):
            try call.requireSignature("ss")
            guard call.arguments[0].string == SecretPortalBackend.interface, call.arguments[1].string == "version"
            else {
                throw SecretServiceError(.invalidArgs, "No such property")
            }
            return [.variant(.uint32(SecretPortalBackend.version))]
        case ("org.freedesktop.DBus.Properties", "GetAll"):
            try call.requireSignature("s")
            let interface = call.arguments[0].string
            return [
                .properties(
                    interface == SecretPortalBackend.interface
                        ? [("version", .uint32(SecretPortalBackend.version))] : [])
            ]
        case (SecretPortalBackend.interface, "RetrieveSecret"):
            try call.requireSignature("osha{sv}")
            guard let applicationID = call.arguments[1].string, case .unixFD(let descriptor) = call.arguments[2] else {
                throw SecretServiceError(
                    .invalidArgs, "RetrieveSecret takes a handle, an app ID, a descriptor and options")
            }
            return try retrieveSecret(for: applicationID, into: descriptor, peer: peer)
        default:
            throw call.unknownMethod
        }
    }

    /// The application's secret, written to `descriptor`; the portal's response 0, or 2 while
    /// the keychain is locked.
    private func retrieveSecret(
        for applicationID: String, into descriptor: Int32, peer: BusPeer
    ) throws(SecretServiceError) -> [BusValue] {
        let collection = try collection("default", alias: true)
        let frontend = (try? connection.nameOwner(SecretPortalBackend.frontendName)) == peer.sender
        let caller = AccessCaller(
            face: .secretPortal, uid: peer.uid, source: .peerCredentials, executable: peer.executable,
            facts: collection.keepsAuditTrail() ? peer.identity?.facts : nil)
        let target = AccessTarget(owner: ownUID, rules: frontend ? .anyProgram : .unknown, locked: collection.isLocked)
        let what = "app=" + DisplayText.quoted(applicationID, limit: 255)
        do throws(AccessRefusal) {
            try AccessDecision.decide(.readSecret, by: caller, on: target)
        } catch {
            try collection.audit(
                AuditTrail.line(
                    .readSecret, by: caller, on: what, outcome: AuditTrail.outcome(granted: nil, refusal: error)))
            switch error {
            case .locked: return [.uint32(2), .properties([])]
            default:
                throw SecretServiceError(
                    .accessDenied,
                    "Only the portal frontend (the owner of \(SecretPortalBackend.frontendName)) may ask for an application's secret"
                )
            }
        }
        guard let service = try collection.openedService() else {
            throw SecretServiceError(.failed, "The default collection lives in memory: it has no TPM key")
        }
        guard !applicationID.isEmpty else {
            // A program outside a sandbox has no ID to derive for: it uses the Secret Service itself.
            throw SecretServiceError(
                .accessDenied, "An application outside a sandbox has no portal secret: it uses the Secret Service")
        }
        let secret: SecretBytes
        do {
            secret = try service.applicationSecret(for: applicationID)
        } catch  where error.code == .interactionNotAllowed {
            return [.uint32(2), .properties([])]
        } catch {
            throw SecretServiceError(error)
        }
        try collection.audit(
            AuditTrail.line(.readSecret, by: caller, on: what, outcome: AuditTrail.outcome(granted: nil, refusal: nil)))
        guard Self.writeAll(secret, to: descriptor) else {
            throw SecretServiceError(.failed, "The application's secret could not be written to its descriptor")
        }
        return [.uint32(0), .properties([])]
    }

    /// Writes `secret` to `descriptor`: the application's pipe, whose reader may have left.
    private static func writeAll(_ secret: SecretBytes, to descriptor: Int32) -> Bool {
        secret.withUnsafeBytes { bytes in
            (try? writeAllToPeer(descriptor, bytes, timeout: SecretPortalBackend.writeTimeout)) != nil
        }
    }
}
