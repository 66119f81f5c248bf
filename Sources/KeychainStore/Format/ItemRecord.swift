package import KeychainVocabulary

/// One item as stored: identity, attributes and (when read) the secret.
package struct ItemRecord: Sendable {
    package var itemID: [UInt8]
    package var generation: UInt64
    package var attributes: ItemAttributes
    package var value: ItemValue
}
