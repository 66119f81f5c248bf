@_exported public import TPMSimulator

// TPMKeychainTesting: what users import in their own test targets. Re-exports TPMSimulator so a
// single `import TPMKeychainTesting` provides both ``SoftwareTPM`` and ``RecordingTPMProxy``.
