import Crypto
import FoundationEssentials
import KeychainVocabulary
import SystemCalls
import TPM
import WireFormat

#if canImport(Glibc)
import Glibc
#endif

// Items as decoded from authenticated bytes: their identity, and a generic password's
// attributes from format 2's tagged list.
extension ItemIdentity {
    /// The identity of attributes already decrypted and authenticated (their names were
    /// validated when written; a file that fails this was not written by TPMKeychain).
    init(checked attributes: ItemAttributes) {
        self.init(unchecked: attributes.accessGroupName, attributes.service, attributes.account)
    }
}

extension ItemAttributes {
    /// A generic password's attributes from its format-2 tagged list.
    ///
    /// - Throws: ``KeychainError`` `.tampered` when the service or account is missing or not UTF-8.
    init(_ list: AttributeList, accessibility: Accessibility, path: String) throws(KeychainError) {
        // SecItem code may store no service, or an account that is not text (Data): absent counts
        // as empty, as Apple's primary keys do; such an account is shown as its hex digits.
        let service = list.string(AttributeTag.service) ?? list[AttributeTag.service].map { $0.hexString } ?? ""
        let account = list.string(AttributeTag.account) ?? list[AttributeTag.account].map { $0.hexString } ?? ""
        func date(_ tag: FourCharacterCode) -> Date {
            let nanoseconds = list.nanoseconds(tag) ?? 0
            // Whole milliseconds (items moved from format 1) convert as format 1 did, to the same Date.
            if nanoseconds % 1_000_000 == 0 {
                return Date(timeIntervalSince1970: Double(nanoseconds / 1_000_000) / 1000)
            }
            return Date(timeIntervalSince1970: Double(nanoseconds) / 1_000_000_000)
        }
        self.init(
            service: service, account: account, accessGroupName: list.string(AttributeTag.accessGroup) ?? "",
            label: list.string(AttributeTag.label), comment: list.string(AttributeTag.comment),
            genericData: list[AttributeTag.generic].map { Data($0) },
            creationDate: date(AttributeTag.creationDate), modificationDate: date(AttributeTag.modificationDate),
            accessibility: accessibility)
    }
}
