package import KeychainStore

/// The store's progress seam (``KeychainStore/OperationProgress``), for the faces above this
/// module whose own whole-store operations report through it (KeychainStorage's cipher change),
/// and for the stress tool that observes them.
package typealias OperationProgress = KeychainStore.OperationProgress
