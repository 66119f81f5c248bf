// swift-format-ignore-file: AlwaysUseLowerCamelCase

import Foundation
import KeychainVocabulary
import TPMKeychain

// TPM 2.0 Key Files: a Linux addition to SecKey, with no Apple counterpart (the Secure Enclave
// has no file format that other programs load). A TPM key made for key files can be handed to
// the tpm2 OpenSSL provider or ssh-tpm-agent, which use it on the same TPM.

/// In `kSecPrivateKeyAttrs` (or at the top) of SecKeyCreateRandomKey with
/// kSecAttrTokenIDSecureEnclave: `true` makes a key that ``SecKeyCopyTPMKeyFile(_:_:)`` can write
/// as a TPM 2.0 Key File. Such a key is made under the parent other tools derive and has an empty
/// authorization value, so whoever can read the file and open the TPM can use it: it takes no
/// kSecAttrAccessControl beyond an accessibility class, and its item's protection guards only
/// the keychain's own copy. Without it, a TPM key's authorization lives only in its item.
nonisolated(unsafe) public let kSecAttrTPMKeyFile: CFString = "u_TPMKeyFile"

/// The TPM key as a TPM 2.0 Key File ("-----BEGIN TSS2 PRIVATE KEY-----" PEM), which the tpm2
/// OpenSSL provider (`openssl … -provider tpm2`) and ssh-tpm-agent load on this TPM. The private
/// key stays in the TPM: the file holds it encrypted by a TPM key that never leaves it.
///
/// Errors: errSecParam for a software key, or a TPM key not made with ``kSecAttrTPMKeyFile``;
/// errSecItemNotFound once the key's item is deleted; the keychain's reading errors.
public func SecKeyCopyTPMKeyFile(_ key: SecKey, _ error: UnsafeMutablePointer<Unmanaged<CFError>?>?) -> CFString? {
    SecKeyCall.run(error) { () throws(SecStatus) in
        guard case .tpm(let item) = key.material else {
            throw SecStatus(errSecParam, "Only a key that lives in the TPM is written as a TPM key file")
        }
        let pem = try KeyOperations.withTPMKey(item) { (items, result, opened) throws(KeychainError) in
            try items.keyFile(of: result, key: opened)
        }
        return pem as NSString
    }
}
