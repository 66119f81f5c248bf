/// What a write expects to find.
package enum ItemWriteMode: Sendable {
    /// Create; fail with `.duplicateItem` if the item exists.
    case add
    /// Change; fail with `.itemNotFound` if the item does not exist.
    case update
    /// Create or replace.
    case upsert
}
