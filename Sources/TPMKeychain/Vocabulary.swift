// The service's public values (KeychainLocation, TPMChoice, KeychainDevice, the archive's reports,
// Authenticator) are this module's API too; its package operations are the door the faces use.
@_exported public import KeychainService
// Archives (KeychainArchive, DeviceImportKey) are this module's API too.
@_exported public import KeychainTransfer
// The vocabulary is defined once, below the engine, and is TPMKeychain's public API: importing
// TPMKeychain brings KeychainError, Accessibility, AccessControl and ItemAttributes; and
// SecretBytes, which passcodes and recovery keys are handed in, without importing TPM.
@_exported public import KeychainVocabulary
@_exported public import Secrets
