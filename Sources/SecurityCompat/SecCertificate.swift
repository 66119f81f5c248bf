// swift-format-ignore-file: AlwaysUseLowerCamelCase
// Apple's names, kept as Apple spells them so that ported code compiles unchanged.

/// An X.509 certificate, as Apple's SecCertificate: its DER bytes, parsed by swift-certificates.
public final class SecCertificate: Hashable, Sendable {
    let certificate: ParsedCertificate

    init(_ certificate: ParsedCertificate) { self.certificate = certificate }

    /// Equal certificates have the same DER bytes, as CFEqual compares them.
    public static func == (lhs: SecCertificate, rhs: SecCertificate) -> Bool {
        lhs.certificate.der == rhs.certificate.der
    }

    public func hash(into hasher: inout Hasher) { hasher.combine(certificate.der) }
}

/// A certificate with its private key, as Apple's SecIdentity: found as a kSecClassIdentity item
/// (a certificate item and a private key item whose application label is the certificate's
/// public key hash), or made with SecIdentityCreateWithCertificate.
public final class SecIdentity: Hashable, Sendable {
    let certificate: SecCertificate
    let privateKey: SecKey

    init(certificate: SecCertificate, privateKey: SecKey) {
        self.certificate = certificate
        self.privateKey = privateKey
    }

    public static func == (lhs: SecIdentity, rhs: SecIdentity) -> Bool {
        lhs.certificate == rhs.certificate && lhs.privateKey == rhs.privateKey
    }

    public func hash(into hasher: inout Hasher) { hasher.combine(certificate) }
}

/// A certificate from DER bytes; nil when they are not one.
public func SecCertificateCreateWithData(_ allocator: CFAllocator?, _ data: CFData) -> SecCertificate? {
    (try? ParsedCertificate(der: Array(Data(referencing: data)))).map(SecCertificate.init)
}

/// The certificate's DER bytes.
public func SecCertificateCopyData(_ certificate: SecCertificate) -> CFData {
    NSData(bytes: certificate.certificate.der, length: certificate.certificate.der.count)
}

/// A name for people: the subject's common name, else its email address, else its first
/// organizational unit or organization, else the whole subject, as Apple's summary chooses.
public func SecCertificateCopySubjectSummary(_ certificate: SecCertificate) -> CFString? {
    certificate.certificate.subjectSummary as NSString
}

/// The subject's common name (errSecSuccess), or errSecItemNotFound (nil) without one.
public func SecCertificateCopyCommonName(
    _ certificate: SecCertificate, _ commonName: UnsafeMutablePointer<CFString?>
) -> OSStatus {
    commonName.pointee = certificate.certificate.commonName.map { $0 as NSString }
    return commonName.pointee == nil ? errSecItemNotFound : errSecSuccess
}

/// The serial number's bytes (big-endian, as in the certificate).
public func SecCertificateCopySerialNumberData(
    _ certificate: SecCertificate, _ error: UnsafeMutablePointer<Unmanaged<CFError>?>?
) -> CFData? {
    let serial = certificate.certificate.serialNumber
    return NSData(bytes: serial, length: serial.count)
}

/// The certificate's public key (EC P-256/384/521 or RSA); nil for another algorithm.
public func SecCertificateCopyKey(_ certificate: SecCertificate) -> SecKey? {
    certificate.certificate.publicKey.map(SecKey.init)
}

/// The identity's certificate.
public func SecIdentityCopyCertificate(
    _ identityRef: SecIdentity, _ certificateRef: UnsafeMutablePointer<SecCertificate?>
) -> OSStatus {
    certificateRef.pointee = identityRef.certificate
    return errSecSuccess
}

/// The identity's private key (a key in the TPM included).
public func SecIdentityCopyPrivateKey(
    _ identityRef: SecIdentity, _ privateKeyRef: UnsafeMutablePointer<SecKey?>
)
    -> OSStatus
{
    privateKeyRef.pointee = identityRef.privateKey
    return errSecSuccess
}

/// The identity of `certificate` and the private key stored for it (macOS's function): the key
/// item whose application label is the certificate's public key hash; errSecItemNotFound when
/// the keychain holds none.
public func SecIdentityCreateWithCertificate(
    _ keychainOrArray: CFTypeRef?, _ certificateRef: SecCertificate, _ identityRef: UnsafeMutablePointer<SecIdentity?>
) -> OSStatus {
    identityRef.pointee = nil
    do {
        identityRef.pointee = try CertificateItems.identity(of: certificateRef, context: nil)
        return errSecSuccess
    } catch {
        return error.status
    }
}

nonisolated(unsafe) public let kSecAttrCertificateType: CFString = "ctyp"
nonisolated(unsafe) public let kSecAttrCertificateEncoding: CFString = "cenc"
nonisolated(unsafe) public let kSecAttrSubject: CFString = "subj"
nonisolated(unsafe) public let kSecAttrIssuer: CFString = "issr"
nonisolated(unsafe) public let kSecAttrSerialNumber: CFString = "slnr"
nonisolated(unsafe) public let kSecAttrSubjectKeyID: CFString = "skid"
nonisolated(unsafe) public let kSecAttrPublicKeyHash: CFString = "pkhh"
