import Crypto
import KeychainService
import KeychainVocabulary
import TPM

// Where a store keeps its device import key: a key-agreement key in the TPM, held by a key item
// of its own tag, ThisDeviceOnly (so no export takes it, and it dies with the TPM).
extension DeviceImportKey {
    static let applicationTag = Array("tpm-keychain.device-import-key".utf8)

    /// The store's import key item and its public key, if it has one.
    static func item(of service: ItemService) throws(KeychainError) -> (ItemQueryResult, [UInt8])? {
        var matching = AttributeList()
        matching[AttributeTag.applicationTag] = applicationTag
        for result in try service.query(.key, matching: matching) where ItemService.holdsTPMKey(result) {
            if let publicKey = result.attributes[AttributeTag.publicKey] { return (result, publicKey) }
        }
        return nil
    }

    /// The store's import key, made in the TPM when `create` and there is none.
    static func ofStore(_ service: ItemService, create: Bool) throws(KeychainError) -> DeviceImportKey {
        if let (_, publicKey) = try item(of: service) { return try DeviceImportKey(publicKey: publicKey) }
        guard create else { throw KeychainError(.itemNotFound, "The store has no device import key") }
        let publicKey = try service.createTPMKey(
            .keyAgreement, control: AccessControl(unconstrained: .afterFirstUnlockThisDeviceOnly), enrollment: nil
        ) { publicKey in
            var attributes = AttributeList()
            attributes[AttributeTag.applicationTag] = applicationTag
            attributes.setString("tpm-keychain device import key", for: AttributeTag.label)
            attributes.setString("1", for: AttributeTag.keyClass)
            attributes.setString("73", for: AttributeTag.type)
            attributes[AttributeTag.applicationLabel] = Array(Insecure.SHA1.hash(data: publicKey))
            attributes[AttributeTag.publicKey] = publicKey
            return attributes
        }
        return try DeviceImportKey(publicKey: publicKey)
    }
}
