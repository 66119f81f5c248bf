package import FoundationEssentials

/// What the secret bytes hold, so tools can show them sensibly. Authenticated with the item.
package enum ValueKind: UInt8, Sendable, Hashable {
    case data = 0
    case string = 1
    case bool = 2
    case integer = 3
    case double = 4
    case json = 5
    /// A key that lives in the TPM (its blob and authorization value): used, never returned.
    case tpmKey = 6
}

/// Attributes a write sets; nil leaves the stored value (or nothing, for a new item) as it is,
/// and a tag in `clearing` removes that attribute.
package struct AttributeChanges: Sendable {
    package var label: String?
    package var comment: String?
    package var genericData: Data?
    package var accessibility: Accessibility?
    package var clearing: Set<FourCharacterCode>
    /// The item's `mdat` (nanoseconds since 1970) instead of now: for an import, which moves an
    /// item without changing it.
    package var modificationDate: Int64?

    package init(
        label: String? = nil, comment: String? = nil, genericData: Data? = nil, accessibility: Accessibility? = nil,
        clearing: Set<FourCharacterCode> = []
    ) {
        self.label = label
        self.comment = comment
        self.genericData = genericData
        self.accessibility = accessibility
        self.clearing = clearing
    }

    /// Applies the changes to an item's tagged attributes: clearing first, then setting.
    package func apply(to attributes: inout AttributeList) {
        for tag in clearing { attributes[tag] = nil }
        if let label { attributes.setString(label, for: AttributeTag.label) }
        if let comment { attributes.setString(comment, for: AttributeTag.comment) }
        if let genericData { attributes[AttributeTag.generic] = Array(genericData) }
    }
}

/// A secret and what kind of value it encodes.
package struct ItemValue: Sendable, Hashable {
    /// Values up to 16 MiB; at least 1 MiB is promised.
    package static let maximumSize = 16 << 20

    package let kind: ValueKind
    package let bytes: [UInt8]

    package init(kind: ValueKind, bytes: [UInt8]) {
        self.kind = kind
        self.bytes = bytes
    }
}
