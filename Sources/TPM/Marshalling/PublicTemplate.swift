import Crypto
import WireFormat

/// The key type of the storage root key.
public enum StorageKeyAlgorithm: String, Sendable, Hashable, Codable {
    /// NIST P-256, the TCG provisioning-guidance default.
    case eccP256 = "ecc-p256"
    /// RSA-2048, for TPMs without ECC.
    case rsa2048 = "rsa-2048"
    /// NIST P-256 from the template with empty `unique` fields (TCG EK Credential Profile B.4.5,
    /// template H-2): the primary key that the TPM 2.0 Key File format names by parent 0x40000001,
    /// which the tpm2 OpenSSL provider, tpm2-tss-engine and ssh-tpm-agent derive. Only keys made
    /// to be written as key files (``TPMKey/tss2KeyFile()``) live under it.
    case eccP256KeyFile = "ecc-p256-key-file"

    /// The TPM_ALG_ID stored files record for the key's type.
    var algorithmID: UInt16 { self == .rsa2048 ? AlgorithmID.rsa : AlgorithmID.ecc }
}

/// A TPMT_PUBLIC (TPM 2.0 Part 2 §12.2.4) in its canonical encoding.
///
/// Built in Swift so that the same bytes are handed to the TPM (via Tss2_MU) and hashed into
/// names this layer predicts or compares.
struct PublicTemplate: Equatable {
    /// The marshalled TPMT_PUBLIC.
    let bytes: [UInt8]

    /// TCG TPM v2.0 Provisioning Guidance §7.5.1, "Storage Primary Key (SRK) Templates": the
    /// owner-hierarchy storage key every TCG-conformant tool derives, so a persistent SRK made by
    /// other software is recognisable. `unique` is zero-filled to the key size, as the guidance says,
    /// except for ``StorageKeyAlgorithm/eccP256KeyFile``, the key-file parent, where it is empty.
    static func storageRootKey(_ algorithm: StorageKeyAlgorithm) -> PublicTemplate {
        let attributes: ObjectAttributes = [
            .fixedTPM, .fixedParent, .sensitiveDataOrigin, .userWithAuth,
            .noDA, .restricted, .decrypt,
        ]
        var writer = WireWriter()
        var unique = WireWriter()
        switch algorithm {
        case .eccP256, .eccP256KeyFile:
            writer.append(AlgorithmID.ecc)
            writer.append(AlgorithmID.sha256)
            writer.append(attributes.rawValue)
            writer.appendSized([]) // authPolicy
            appendAES128CFB(&writer) // symmetric
            writer.append(AlgorithmID.null) // scheme
            writer.append(AlgorithmID.eccNistP256) // curveID
            writer.append(AlgorithmID.null) // kdf
            let size = algorithm == .eccP256KeyFile ? 0 : 32
            unique.appendSized([UInt8](repeating: 0, count: size))
            unique.appendSized([UInt8](repeating: 0, count: size))
        case .rsa2048:
            writer.append(AlgorithmID.rsa)
            writer.append(AlgorithmID.sha256)
            writer.append(attributes.rawValue)
            writer.appendSized([])
            appendAES128CFB(&writer)
            writer.append(AlgorithmID.null) // scheme
            writer.append(UInt16(2048)) // keyBits
            writer.append(UInt32(0)) // exponent: default 65537
            unique.appendSized([UInt8](repeating: 0, count: 256))
        }
        writer.append(raw: unique.bytes)
        return PublicTemplate(bytes: writer.bytes)
    }

    /// A sealed-data object (keyed-hash with no scheme) under a storage parent.
    ///
    /// fixedTPM and fixedParent keep it from being duplicated off this TPM. adminWithPolicy is set,
    /// and userWithAuth is clear for every policy but PolicyAuthValue alone, so every use must
    /// satisfy `policy`: a PIN is PolicyAuthValue, never a bare password, and policies compose.
    /// An object whose policy is PolicyAuthValue alone asks for its authorization value and
    /// nothing else, which is exactly what userWithAuth asks in an HMAC session: with it set, such
    /// an object (a store's master key) unseals in the connection's salted HMAC session, two
    /// commands fewer than a policy session (StartAuthSession, PolicyAuthValue), and the value
    /// still never crosses the bus.
    ///
    /// An object without an authorization secret is noDA: there is nothing to guess, and a
    /// DA-protected object counts a failure against the whole TPM after every unorderly shutdown
    /// that followed its use (TPM 2.0 Part 1 §19.8.6), so a few killed processes would lock out
    /// every PIN on the machine. Only an object with a PIN is worth that protection.
    static func sealedData(policy: PolicyDigest, dictionaryAttackProtected: Bool) -> PublicTemplate {
        let attributes = authorization(policy, dictionaryAttackProtected).union([.fixedTPM, .fixedParent])
        var writer = WireWriter()
        writer.append(AlgorithmID.keyedHash)
        writer.append(AlgorithmID.sha256)
        writer.append(attributes.rawValue)
        writer.appendSized(policy.bytes)
        writer.append(AlgorithmID.null) // keyed-hash scheme
        writer.appendSized([]) // unique: computed by the TPM
        return PublicTemplate(bytes: writer.bytes)
    }

    /// An ECC P-256 key made in the TPM (sensitiveDataOrigin) for `usage`, bound to it and its
    /// parent (fixedTPM, fixedParent), unrestricted, with no scheme or KDF of its own: TPM2_Sign
    /// and TPM2_ECDH_ZGen name theirs, so one signing key serves ECDSA with SHA-256, -384 and
    /// -512 digests. Authorization as for sealed data (``sealedData(policy:dictionaryAttackProtected:)``):
    /// adminWithPolicy, userWithAuth only beside PolicyAuthValue alone, noDA without a PIN.
    static func eccKey(_ usage: TPMKeyUsage, policy: PolicyDigest, dictionaryAttackProtected: Bool) -> PublicTemplate {
        let attributes = authorization(policy, dictionaryAttackProtected).union([
            .fixedTPM, .fixedParent, .sensitiveDataOrigin,
        ]).union(usage.roles)
        var writer = WireWriter()
        writer.append(AlgorithmID.ecc)
        writer.append(AlgorithmID.sha256)
        writer.append(attributes.rawValue)
        writer.appendSized(policy.bytes)
        writer.append(AlgorithmID.null) // symmetric: none (not a storage key)
        writer.append(AlgorithmID.null) // scheme: chosen per command
        writer.append(AlgorithmID.eccNistP256)
        writer.append(AlgorithmID.null) // kdf
        writer.appendSized([]) // unique x: made by the TPM
        writer.appendSized([]) // unique y
        return PublicTemplate(bytes: writer.bytes)
    }

    /// An HMAC-SHA256 key made in the TPM (a keyed-hash object with the HMAC scheme,
    /// sensitiveDataOrigin), bound to it and its parent, unrestricted, for TPM2_HMAC only.
    /// Authorization as for sealed data.
    static func hmacKey(policy: PolicyDigest) -> PublicTemplate {
        let attributes = authorization(policy, false).union([.fixedTPM, .fixedParent, .sensitiveDataOrigin, .sign])
        var writer = WireWriter()
        writer.append(AlgorithmID.keyedHash)
        writer.append(AlgorithmID.sha256)
        writer.append(attributes.rawValue)
        writer.appendSized(policy.bytes)
        writer.append(AlgorithmID.hmac) // keyed-hash scheme
        writer.append(AlgorithmID.sha256) // its hash
        writer.appendSized([]) // unique: computed by the TPM
        return PublicTemplate(bytes: writer.bytes)
    }

    /// How an object made by this layer is authorized: adminWithPolicy always, userWithAuth only
    /// beside the policy PolicyAuthValue alone (which asks no more), noDA without a PIN.
    private static func authorization(_ policy: PolicyDigest, _ dictionaryAttackProtected: Bool) -> ObjectAttributes {
        var attributes: ObjectAttributes = [.adminWithPolicy]
        if !dictionaryAttackProtected { attributes.insert(.noDA) }
        if policy == Policy.authValue.digest { attributes.insert(.userWithAuth) }
        return attributes
    }

    /// The TPM2B_PUBLIC wrapping (size prefix) that Tss2_MU unmarshals.
    var sizedBytes: [UInt8] {
        var writer = WireWriter()
        writer.appendSized(bytes)
        return writer.bytes
    }

    private static func appendAES128CFB(_ writer: inout WireWriter) {
        writer.append(AlgorithmID.aes)
        writer.append(UInt16(128))
        writer.append(AlgorithmID.cfb)
    }
}

/// TPM 2.0 Part 1 §16: an object's or NV index's name is nameAlg || H_nameAlg(public area).
enum ObjectName {
    static func sha256(ofPublicArea publicArea: [UInt8]) -> [UInt8] {
        var name: [UInt8] = [UInt8(AlgorithmID.sha256 >> 8), UInt8(AlgorithmID.sha256 & 0xFF)]
        name.append(contentsOf: SHA256.hash(data: publicArea))
        return name
    }
}
