// The value types the store engine and this API share: KeychainError, ItemAttributes, Accessibility.
@_exported public import struct KeychainStore.KeychainError
@_exported public import struct KeychainStore.ItemAttributes
@_exported public import enum KeychainStore.Accessibility
