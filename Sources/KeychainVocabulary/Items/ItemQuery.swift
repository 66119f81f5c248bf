/// One query over the store: what the `Keychain` listings and the SecItem layer ask.
///
/// Matching is equality on every attribute in ``matching`` (class first), with Apple's rule for
/// `sync`: a query that does not say matches only items that are not synchronizable. Results come
/// in creation order (`cdat`, then item ID), as Apple's match-limit-all does.
package struct ItemQuery: Sendable {
    package enum Synchronizable: Sendable { case yes, no, any }
    package enum Limit: Sendable { case one, all }

    package var itemClass: ItemClass
    /// Attributes that must be present with exactly these values (`sync` excepted: see ``synchronizable``).
    package var matching: AttributeList
    package var synchronizable: Synchronizable
    package var limit: Limit
    /// Decrypt and return each result's secret.
    package var returnsData: Bool

    package init(
        itemClass: ItemClass, matching: AttributeList = AttributeList(), synchronizable: Synchronizable = .no,
        limit: Limit = .all, returnsData: Bool = false
    ) {
        self.itemClass = itemClass
        self.matching = matching
        self.synchronizable = synchronizable
        self.limit = limit
        self.returnsData = returnsData
    }
}

/// One item a query found.
package struct ItemQueryResult: Sendable, Equatable {
    /// Stable across updates of the item (its class and item ID), gone with the item: Apple's
    /// persistent reference.
    package let reference: [UInt8]
    package let itemClass: ItemClass
    package let attributes: AttributeList
    package let accessibility: Accessibility
    package let kind: ValueKind
    /// The secret, when the query asked for data.
    package let value: [UInt8]?
    /// The key record the secret needs (``masterKeyRecord``: none; no person needed).
    package var keyRecord: [UInt8] = Self.masterKeyRecord

    /// The key record ID that stands for the store's master key: all zero.
    package static let masterKeyRecord = [UInt8](repeating: 0, count: 16)

    package init(
        reference: [UInt8], itemClass: ItemClass, attributes: AttributeList, accessibility: Accessibility,
        kind: ValueKind,
        value: [UInt8]?, keyRecord: [UInt8] = Self.masterKeyRecord
    ) {
        self.reference = reference
        self.itemClass = itemClass
        self.attributes = attributes
        self.accessibility = accessibility
        self.kind = kind
        self.value = value
        self.keyRecord = keyRecord
    }

    /// Whether the secret needs a key record opened (a person, or an unlocked device).
    package var isProtected: Bool { keyRecord != Self.masterKeyRecord }
}
