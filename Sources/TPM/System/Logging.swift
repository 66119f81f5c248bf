import Logging

/// The TPM layer's log. Debug level only: events an operator may want to trace (handles a crashed
/// process left, which storage key was used), never secrets, names of items or PINs.
let tpmLogger = Logger(label: "tpm-keychain.tpm")
