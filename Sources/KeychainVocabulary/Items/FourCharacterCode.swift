import WireFormat

/// A four-character code, as Apple's keychain names attributes (`kSecAttrAccount` is "acct") and
/// item classes ("genp"): four ASCII bytes, stored as a big-endian UINT32.
package struct FourCharacterCode: Sendable, Hashable, Comparable, CustomStringConvertible {
    package let rawValue: UInt32

    package init(rawValue: UInt32) { self.rawValue = rawValue }

    /// - Precondition: `text` is four ASCII characters (every use is a literal).
    package init(_ text: StaticString) {
        precondition(text.utf8CodeUnitCount == 4, "a four-character code has four characters")
        rawValue = text.withUTF8Buffer { BigEndian.integer($0) }
    }

    /// Four ASCII characters, else nil.
    package init?(text: String) {
        let bytes = Array(text.utf8)
        guard bytes.count == 4, bytes.allSatisfy({ $0 < 0x80 }) else { return nil }
        rawValue = BigEndian.integer(bytes)
    }

    package var description: String {
        String(decoding: BigEndian.bytes(rawValue), as: UTF8.self)
    }

    package static func < (lhs: Self, rhs: Self) -> Bool { lhs.rawValue < rhs.rawValue }
}

/// The attribute tags format 2 knows, with Apple's codes.
package enum AttributeTag {
    package static let account = FourCharacterCode("acct")
    package static let service = FourCharacterCode("svce")
    package static let accessGroup = FourCharacterCode("agrp")
    package static let label = FourCharacterCode("labl")
    package static let comment = FourCharacterCode("icmt")
    package static let generic = FourCharacterCode("gena")
    package static let description = FourCharacterCode("desc")
    package static let type = FourCharacterCode("type")
    package static let creator = FourCharacterCode("crtr")
    package static let server = FourCharacterCode("srvr")
    package static let `protocol` = FourCharacterCode("ptcl")
    package static let port = FourCharacterCode("port")
    package static let path = FourCharacterCode("path")
    package static let authenticationType = FourCharacterCode("atyp")
    package static let securityDomain = FourCharacterCode("sdmn")
    package static let invisible = FourCharacterCode("invi")
    package static let negative = FourCharacterCode("nega")
    package static let synchronizable = FourCharacterCode("sync")
    package static let accessibility = FourCharacterCode("pdmn")
    package static let creationDate = FourCharacterCode("cdat")
    package static let modificationDate = FourCharacterCode("mdat")
    // Keys (kSecClassKey).
    /// kSecAttrKeyClass: "0" public, "1" private, "2" symmetric.
    package static let keyClass = FourCharacterCode("kcls")
    /// kSecAttrApplicationLabel: for asymmetric keys, the SHA-1 of the public key.
    package static let applicationLabel = FourCharacterCode("klbl")
    /// kSecAttrApplicationTag: the application's own name for the key (data).
    package static let applicationTag = FourCharacterCode("atag")
    /// kSecAttrKeySizeInBits.
    package static let keySizeInBits = FourCharacterCode("bsiz")
    /// kSecAttrEffectiveKeySize.
    package static let effectiveKeySize = FourCharacterCode("esiz")
    /// kSecAttrTokenID: "com.apple.setoken" for a key that lives in the TPM.
    package static let tokenID = FourCharacterCode("tkid")
    /// The public key of a stored private key (X9.63 for EC, PKCS#1 for RSA): not Apple's, never
    /// returned as an attribute; it lets the public key be read without opening the private one.
    package static let publicKey = FourCharacterCode("TKPK")
    // Certificates (kSecClassCertificate), derived from the certificate when it is stored.
    /// kSecAttrSubject: the subject's DER-encoded distinguished name.
    package static let subject = FourCharacterCode("subj")
    /// kSecAttrIssuer: the issuer's DER-encoded distinguished name.
    package static let issuer = FourCharacterCode("issr")
    /// kSecAttrSerialNumber: the serial number's content octets (big-endian, two's complement).
    package static let serialNumber = FourCharacterCode("slnr")
    /// kSecAttrPublicKeyHash: the SHA-1 of the certificate's public key (X9.63 for EC), which
    /// is the application label of its private key: how an identity pairs the two.
    package static let publicKeyHash = FourCharacterCode("pkhh")
}
