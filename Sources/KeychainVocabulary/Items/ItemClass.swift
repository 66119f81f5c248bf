import WireFormat

/// An item's class, with Apple's codes and primary keys: the attributes that make an item unique
/// (SecItem's errSecDuplicateItem), which also name its file.
package enum ItemClass: UInt32, Sendable, Hashable, CaseIterable {
    /// kSecClassGenericPassword.
    case genericPassword = 0x6765_6E70 // "genp"
    /// kSecClassInternetPassword.
    case internetPassword = 0x696E_6574 // "inet"
    /// kSecClassKey: private keys (in software or in the TPM) and public keys.
    case key = 0x6B65_7973 // "keys"
    /// kSecClassCertificate: X.509 certificates (their DER is the value).
    case certificate = 0x6365_7274 // "cert"

    package var code: FourCharacterCode { FourCharacterCode(rawValue: rawValue) }

    /// Apple's primary key, in the order it is encoded. An absent attribute counts as empty, and
    /// an absent `sync` as false (Apple's defaults), so they name the same item.
    package var primaryKey: [FourCharacterCode] {
        switch self {
        case .genericPassword:
            [AttributeTag.accessGroup, AttributeTag.service, AttributeTag.account, AttributeTag.synchronizable]
        case .internetPassword:
            [
                AttributeTag.accessGroup, AttributeTag.server, AttributeTag.protocol, AttributeTag.port,
                AttributeTag.path,
                AttributeTag.account, AttributeTag.authenticationType, AttributeTag.securityDomain,
                AttributeTag.synchronizable,
            ]
        case .key:
            // Apple's key primary key (without its start and end dates, which nothing sets), and
            // the token: a TPM key and a software key of the same label are two items.
            [
                AttributeTag.accessGroup, AttributeTag.keyClass, AttributeTag.applicationLabel,
                AttributeTag.applicationTag, AttributeTag.type, AttributeTag.keySizeInBits,
                AttributeTag.effectiveKeySize, AttributeTag.tokenID, AttributeTag.synchronizable,
            ]
        case .certificate:
            // Apple's: the certificate type, issuer and serial number.
            [
                AttributeTag.accessGroup, FourCharacterCode("ctyp"), FourCharacterCode("issr"),
                FourCharacterCode("slnr"), AttributeTag.synchronizable,
            ]
        }
    }

    /// The primary key as bytes (the class, then for each primary-key tag: tag, UINT32 length,
    /// value), for file names and for the secret's additional data: equal exactly when two items
    /// are the same item.
    package func encodedPrimaryKey(of attributes: AttributeList) -> [UInt8] {
        var bytes = BigEndian.bytes(rawValue)
        for tag in primaryKey {
            var value = attributes[tag] ?? []
            if tag == AttributeTag.synchronizable && value.isEmpty { value = [0] }
            BigEndian.append(tag.rawValue, to: &bytes)
            BigEndian.append(UInt32(value.count), to: &bytes)
            bytes.append(contentsOf: value)
        }
        return bytes
    }
}
