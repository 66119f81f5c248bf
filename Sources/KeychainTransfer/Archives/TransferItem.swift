import KeychainService
package import KeychainVocabulary

/// One item on its way out of a store or into one: what an archive record carries, and what
/// the readers of other keyrings' exports (pass, password managers' CSV and JSON) produce. It
/// holds the secret: keep it only as long as the write that takes it.
package struct TransferItem: Sendable {
    package var itemClass: ItemClass
    package var accessibility: Accessibility
    /// Every attribute, the primary key and the dates (`cdat`, `mdat`) included.
    package var attributes: AttributeList
    package var value: ItemValue

    package init(itemClass: ItemClass, accessibility: Accessibility, attributes: AttributeList, value: ItemValue) {
        self.itemClass = itemClass
        self.accessibility = accessibility
        self.attributes = attributes
        self.value = value
    }

    /// How the item names itself in a dry run or a report: class, then the names that tell it
    /// apart (never the secret).
    package var summary: String { Self.summary(itemClass, attributes) }

    package static func summary(_ itemClass: ItemClass, _ attributes: AttributeList) -> String {
        let account = attributes.string(AttributeTag.account) ?? ""
        switch itemClass {
        case .genericPassword:
            return "generic password \"\(attributes.string(AttributeTag.service) ?? "")\" / \"\(account)\""
        case .internetPassword:
            return "internet password \"\(attributes.string(AttributeTag.server) ?? "")\" / \"\(account)\""
        case .key:
            return "key \"\(attributes.string(AttributeTag.label) ?? "")\""
        case .certificate:
            return "certificate \"\(attributes.string(AttributeTag.label) ?? "")\""
        }
    }
}

/// Fresh random bytes (salts) from the system's CSPRNG (getrandom).
func transferRandomBytes(_ count: Int) -> [UInt8] {
    var generator = SystemRandomNumberGenerator()
    return (0..<count).map { _ in UInt8.random(in: 0...255, using: &generator) }
}

extension Array where Element == UInt8 {
    /// Overwrites the bytes with zeros: a record's plaintext once it is sealed or parsed (copies
    /// made on the way, such as an item's value, are not reached).
    mutating func zeroize() {
        for index in indices { self[index] = 0 }
    }
}
