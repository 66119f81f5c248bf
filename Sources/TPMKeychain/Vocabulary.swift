// The vocabulary is defined once, below the engine, and is TPMKeychain's public API: importing
// TPMKeychain brings KeychainError, Accessibility, AccessControl and ItemAttributes.
@_exported public import KeychainVocabulary
