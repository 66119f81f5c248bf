import Crypto
import FoundationEssentials
package import KeychainVocabulary
import SystemCalls
package import TPM

#if canImport(Glibc)
import Glibc
#endif

// The lock state, as an NV index the TPM asserts in key records' policies.
extension Device {
    /// The lock-state index's bytes, or nil when it is not defined.
    func lockState(_ state: State, _ connection: TPMConnection) throws(KeychainError) -> (sinceBoot: Bool, now: Bool)? {
        let index = state.indices.lockState
        do {
            let bytes = try connection.readPublicNV(index, count: 2, authValue: state.nvAuthorization)
            return (bytes[0] == 1, bytes[1] == 1)
        } catch let error as TPMError where error.code == .handleNotFound {
            return nil
        } catch let error as TPMError where error.code == .nvIndexUninitialized {
            return (false, false)
        } catch let error as TPMError where error.code == .authorizationFailed {
            throw Self.taken(index, error)
        } catch {
            throw KeychainError(deviceTPM: error)
        }
    }

    /// Writes the lock state, defining the index (2 bytes, CLEAR_STCLEAR, NO_DA) when missing,
    /// and touches the lock stamp so that reuse windows in every process see the change.
    func writeLockState(unlocked: Bool, _ state: State, _ connection: TPMConnection) throws(KeychainError) {
        let index = state.indices.lockState
        // Whether the device is unlocked is no secret (readable as lockState is): written in an
        // HMAC session, without asking for a salted one.
        let data: [UInt8] = [1, unlocked ? 1 : 0]
        do {
            do {
                try connection.writePublicNV(index, data: data, authValue: state.nvAuthorization)
            } catch let error as TPMError where error.code == .handleNotFound {
                // Gone (undefined by someone with owner authorization): defined again, then written.
                try connection.defineNVIndex(
                    index, kind: .ordinary(size: 2), authValue: state.nvAuthorization, options: Self.lockStateOptions)
                try connection.writePublicNV(index, data: data, authValue: state.nvAuthorization)
            }
        } catch let error as TPMError where error.code == .authorizationFailed {
            throw Self.taken(index, error)
        } catch {
            throw KeychainError(deviceTPM: error)
        }
        try directory().replace(
            Self.lockStampName, with: Array(String(UInt64(Date().timeIntervalSince1970 * 1e9)).utf8), durable: false)
    }

    /// `lock.stamp`: rewritten at every lock and unlock. Its identity (inode, modification time) is
    /// what a reuse window compares, at the cost of one stat, instead of asking the TPM per read.
    static let lockStampName = "lock.stamp"

    /// The lock stamp's identity now (nil when the device was never locked or unlocked).
    package func lockStamp() -> LockStamp? {
        var status = stat()
        guard stat(lockStampPath, &status) == 0 else { return nil }
        return LockStamp(
            inode: UInt64(status.st_ino), seconds: Int64(status.st_mtim.tv_sec),
            nanoseconds: Int64(status.st_mtim.tv_nsec))
    }

    /// Which version of `lock.stamp` is there: a lock or unlock replaces it.
    package struct LockStamp: Equatable, Sendable {
        let inode: UInt64
        let seconds: Int64
        let nanoseconds: Int64
    }

    /// Whether the lock state satisfies `requirement` now (one NV read): what a reuse window
    /// checks, since a key kept in memory must not outlive a lock.
    package func lockSatisfies(_ requirement: LockRequirement) throws(KeychainError) -> Bool {
        guard requirement != .none else { return true }
        return try withConnection { (connection) throws(KeychainError) in
            // Without a passcode the device is always unlocked (a read writes the state when needed).
            guard let state = try state(connection), state.file.passcode != nil else { return true }
            guard let lock = try lockState(state, connection) else { return false }
            return requirement == .unlocked ? lock.sinceBoot && lock.now : lock.sinceBoot
        }
    }

    /// A PolicyNV assertion on the lock state: byte 0 (`sinceBoot`) or 1 equal to 1. A missing
    /// index is defined again locked when a passcode is set (someone undefined it: nothing proves
    /// the person unlocked), unlocked otherwise.
    func lockAssertion(
        _ requirement: LockRequirement, _ state: State, _ connection: TPMConnection
    ) throws(KeychainError) -> PolicyAssertion? {
        guard requirement != .none else { return nil }
        if try lockState(state, connection) == nil {
            try writeLockState(unlocked: state.file.passcode == nil, state, connection)
        }
        // Written now (just above when it was not), so named as the device defined it, written.
        let name: [UInt8]
        if let expected = connection.expectedNVIndexName(state.indices.lockState) {
            name = expected
        } else {
            name = try tpmCall { try connection.nvIndexName(state.indices.lockState) }
        }
        return .nv(
            index: state.indices.lockState, indexName: name, operand: [1], offset: requirement == .unlocked ? 1 : 0,
            comparison: .equal)
    }

    func tpmCall<R>(_ body: () throws -> R) throws(KeychainError) -> R {
        do {
            return try body()
        } catch let error as KeychainError {
            throw error
        } catch {
            throw KeychainError(deviceTPM: error)
        }
    }

    /// Verifies the passcode and unlocks the device (the lock-state index reads unlocked).
    package func unlock(passcode: SecretBytes) throws(KeychainError) {
        try withConnection { (connection) throws(KeychainError) in
            _ = try passcodePrivateKey(passcode, connection)
            guard let state = try state(connection) else {
                throw KeychainError(.passcodeNotSet, "No device passcode is set")
            }
            try writeLockState(unlocked: true, state, connection)
        }
    }

    /// Locks the device: whenUnlocked items are refused by the TPM until the next unlock.
    ///
    /// - Throws: ``KeychainError`` `.passcodeNotSet`: a device without a passcode cannot be locked.
    package func lock() throws(KeychainError) {
        try withConnection { (connection) throws(KeychainError) in
            guard let state = try state(connection), state.file.passcode != nil else {
                throw KeychainError(
                    .passcodeNotSet, "A keychain without a device passcode is always unlocked: set a passcode first")
            }
            try writeLockState(unlocked: false, state, connection)
        }
    }
}

extension KeychainError {
    /// A TPM failure during a device operation.
    package init(deviceTPM error: any Error) {
        guard let error = error as? TPMError else {
            self.init(.tpmUnavailable, "The TPM failed", underlying: error)
            return
        }
        switch error.code {
        case .tpmUnavailable: self.init(.tpmUnavailable, "The TPM cannot be reached", underlying: error)
        case .busy, .timedOut: self.init(.timedOut, "The TPM did not answer in time", underlying: error)
        case .lockout:
            self.init(
                .lockout,
                "The TPM is in dictionary-attack lockout: it recovers with time, or at once when reset with its lockout authorization",
                underlying: error)
        case .authorizationFailed:
            self.init(.authenticationFailed, "The TPM refused the authorization", underlying: error)
        case .ownerAuthorizationFailed: self.init(.authenticationFailed, error.message, underlying: error)
        case .outOfResources:
            self.init(
                .notAvailable,
                "The TPM has no room for another object or session: another program may be holding handles (tpm2_getcap handles-transient, handles-loaded-session)",
                underlying: error)
        case .nvSpaceExhausted:
            self.init(
                .notAvailable,
                "The TPM has no room for another NV index (TPM_RC_NV_SPACE): other programs' indices fill it (systemd 259's NvPCRs do on some chips). List them with tpm2_getcap handles-nv-index and undefine those no longer used (tpm2_nvundefine); clearing the TPM would also free NV, but destroys every key sealed to it, this keychain's included",
                underlying: error)
        default: self.init(.tpmUnavailable, "The TPM failed: \(error.message)", underlying: error)
        }
    }
}
