public import Logging

extension Logger {
    /// What a library uses when its caller gave no logger: every message dropped. TPMKeychain
    /// never creates a logger of its own that would write somewhere (swift-log's guidance for
    /// libraries); pass yours through ``TPMConfiguration/logger`` to see the TPM layer's debug
    /// events (handles a crashed process left, which storage key was used). They never contain
    /// secrets, item names or PINs.
    public static let disabled = Logger(label: "tpm-keychain", factory: { _ in SwiftLogNoOpLogHandler() })
}
