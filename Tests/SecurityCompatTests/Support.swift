import Foundation
import TPM
import TPMKeychain
import TPMKeychainTesting
import Testing

/// A private swtpm, store and device for one test, installed as the process's keychain
/// environment (SecItem calls are process-wide, hence the serialized suite).
final class CompatEnvironment: @unchecked Sendable {
    let simulator: SoftwareTPM
    let directory: String
    let location: KeychainLocation
    let face = SimulatedAuthenticator(biometryType: .faceID)

    init(
        accessGroups: [String] = ["TEAMID.com.example.app", "TEAMID.com.example.shared"],
        passcode: String? = "4711 passcode"
    ) throws {
        simulator = try SoftwareTPM.start()
        directory = NSTemporaryDirectory() + "tpm-keychain-compat-" + UUID().uuidString
        var location = try KeychainLocation(path: directory + "/store", tcti: simulator.tcti)
        location.deviceDirectory = directory + "/device"
        self.location = location
        KeychainEnvironment.reset()
        KeychainEnvironment.location = location
        KeychainEnvironment.applicationIdentifier = "com.example.app"
        KeychainEnvironment.accessGroups = accessGroups
        KeychainEnvironment.authenticator = face
        if let passcode {
            let secret = SecretBytes(copying: Array(passcode.utf8))
            try KeychainDevice(location: location).setPasscode(secret)
            KeychainEnvironment.passcode = .fixed(secret)
        }
    }

    deinit {
        Keychain.closeStore(location)
        KeychainEnvironment.reset()
        simulator.stop()
        try? FileManager.default.removeItem(atPath: directory)
    }
}
