package import TPM

/// What kind of TPM a store's master key is sealed to, as store.meta records it (version 6):
/// a store made on a TPM device never opens on a simulator, and a `swtpm/` directory found in
/// it is used only when the store says it was made on that simulator.
package enum TPMKind: UInt8, Sendable, Equatable {
    /// A TPM the kernel exposes (`/dev/tpmrm0`, `/dev/tpm0`) or a resource manager in front of
    /// one: hardware, firmware, or the virtual TPM of a virtual machine.
    case device = 1
    /// A simulator reached over a socket (swtpm, mssim), its state somewhere outside the store.
    case simulator = 2
    /// The simulator whose state is the store's own `swtpm/` directory.
    case simulatorInStore = 3

    /// What `configuration` reaches, when nothing says the simulator is the store's own.
    package init(_ configuration: TPMConfiguration) {
        self = configuration.isSimulator ? .simulator : .device
    }

    /// Whether nothing sealed to it is bound to hardware.
    package var isSimulated: Bool { self != .device }

    /// For messages: "a TPM device", "a simulated TPM", ...
    package var description: String {
        switch self {
        case .device: "a TPM device"
        case .simulator: "a simulated TPM"
        case .simulatorInStore: "the simulated TPM in its own swtpm/ directory"
        }
    }
}
