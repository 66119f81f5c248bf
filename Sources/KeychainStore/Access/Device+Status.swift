import Crypto
import FoundationEssentials
package import KeychainVocabulary
import SystemCalls
package import TPM
#if canImport(Glibc)
import Glibc
#endif

// What the device holds, read for `tpm-keychain tpm-status` and for the checks that need no TPM.
extension Device {
    /// What the device holds, for `tpm-status` and tests (makes nothing).
    package func status() throws(KeychainError) -> Status {
        try withConnection { (connection) throws(KeychainError) in
            let state = try state(connection)
            return Status(
                passcodeSet: state?.file.passcode != nil, enrollmentRecorded: state?.file.enrollmentRecorded ?? false,
                enrollmentCounter: try state.flatMap { (state) throws(KeychainError) in
                    try counter(state.indices.enrollmentCounter, state, connection)
                },
                passcodeCounter: try state.flatMap { (state) throws(KeychainError) in
                    try counter(state.indices.passcodeCounter, state, connection)
                },
                lockState: try state.flatMap { (state) throws(KeychainError) in try lockState(state, connection) },
                dictionaryAttack: try tpmCall { try connection.dictionaryAttackStatus() }, indices: state?.indices,
                legacyIndices: state?.file.legacyIndices ?? false)
        }
    }

    /// `device.meta` as read, without the TPM and so without authentication (nil when absent):
    /// for what only adds protection or only finds something authenticated elsewhere.
    func peek() throws(KeychainError) -> DeviceFile? {
        try Self.peek(directoryPath)
    }

    private static func peek(_ directoryPath: String) throws(KeychainError) -> DeviceFile? {
        guard let directory = try Directory.open(directoryPath, in: nil, create: false),
            let file = try directory.openFile(DeviceFile.fileName)
        else { return nil }
        guard file.size <= 16384 else { throw KeychainError(.tampered, "\(file.path) is too large to be device state") }
        return try DeviceFile.parse(try file.read(count: file.size, at: 0), path: file.path).file
    }

    /// Whether `device.meta` says a passcode is set: read without the TPM, so not authenticated.
    /// For choices that only add protection or decide what to ask a person (whether a new item
    /// gets a key record, whether to offer the passcode); every decision that opens something
    /// reads the authenticated state instead. A file edited to say otherwise only makes new items
    /// unprotected, as deleting the device state does, or fails authentication where it is used.
    package func passcodeIsSet() throws(KeychainError) -> Bool {
        try Self.passcodeIsSet(directory: directoryPath)
    }

    /// Whether the device whose state is in `directory` has a passcode: a file read, no TPM.
    package static func passcodeIsSet(directory: String) throws(KeychainError) -> Bool {
        try peek(directory)?.passcode != nil
    }

    /// The device's NV base, which names it in key records; nil before the device is made.
    func base(_ connection: TPMConnection?) throws(KeychainError) -> UInt32? {
        try state(connection)?.file.nvBase
    }

    /// What this device's state says of a passcode key a key record was wrapped to.
    package enum PasscodeKeyStanding: Sendable, Equatable {
        /// The device's passcode key now.
        case current
        /// A key this device removed; the TPM's passcode counter moved past `epoch` when it did.
        case retired(epoch: UInt64)
        /// Not a key of this device state: another member's device, another state directory.
        case unknown
    }

    /// - Throws: ``KeychainError`` `.tampered` when `device.meta` fails authentication.
    package func standing(
        ofPasscodeKey publicKey: [UInt8], _ connection: TPMConnection? = nil
    ) throws(KeychainError) -> PasscodeKeyStanding {
        guard let file = try state(connection)?.file else { return .unknown }
        if let current = file.passcode, current.publicKey == publicKey { return .current }
        if let retired = file.retiredPasscodeKeys.last(where: { $0.publicKey == publicKey }) {
            return .retired(epoch: retired.epoch)
        }
        return .unknown
    }
}
