/// How long a TPM takes for each command, to run swtpm at the pace of real hardware through a
/// ``RecordingTPMProxy`` (which holds each command back by its cost before forwarding it).
///
/// swtpm answers in 0.1 to 0.5 ms; real TPMs take milliseconds (firmware) to tens or hundreds of
/// milliseconds (discrete chips), most for key generation and ECDH. The two profiles are models
/// built from published figures (see ``firmware`` and ``discrete``), not measurements of one chip:
/// they show which paths a person would wait on, and by roughly how much.
public struct TPMLatencyProfile: Sendable {
    /// A name for reports ("firmware TPM").
    public let name: String
    /// What a command costs that the table does not name.
    public let defaultCost: Duration
    /// Costs by command code (TPM_CC).
    public let costs: [UInt32: Duration]

    /// A profile: `defaultCost` for every command but those `costs` names.
    public init(name: String, defaultCost: Duration, costs: [UInt32: Duration] = [:]) {
        self.name = name
        self.defaultCost = defaultCost
        self.costs = costs
    }

    /// What `command` costs under this profile.
    public func cost(of command: UInt32) -> Duration { costs[command] ?? defaultCost }

    /// What a sequence of commands costs under this profile (swtpm's own time not included).
    public func cost(of commands: [UInt32]) -> Duration {
        commands.reduce(.zero) { $0 + cost(of: $1) }
    }

    /// A firmware TPM (Intel PTT, AMD fTPM). A full policy unseal of about 18 commands took 0.20 s
    /// once policy digests were cached (archledger/irlume#248), about 10 ms a command; key
    /// generation and ECDH cost several times that.
    public static let firmware = TPMLatencyProfile(
        name: "firmware TPM", defaultCost: .milliseconds(5),
        costs: [
            Code.createPrimary: .milliseconds(40), Code.create: .milliseconds(30),
            Code.startAuthSession: .milliseconds(20),
            Code.load: .milliseconds(10), Code.unseal: .milliseconds(8), Code.nvDefineSpace: .milliseconds(15),
            Code.nvWrite: .milliseconds(10), Code.nvIncrement: .milliseconds(10), Code.contextLoad: .milliseconds(8),
            Code.contextSave: .milliseconds(8),
        ])

    /// A discrete TPM chip on SPI or LPC (Infineon SLB9670, Nuvoton NPCT7xx, ST33). ECC key
    /// generation from the seed takes 52 to 231 ms and an ECDH agreement 29 to 247 ms (wolfTPM's
    /// published figures); a full policy unseal took 2.72 s after caching digests, 10.9 s before
    /// (archledger/irlume#246, #248).
    public static let discrete = TPMLatencyProfile(
        name: "discrete TPM", defaultCost: .milliseconds(20),
        costs: [
            Code.createPrimary: .milliseconds(150), Code.create: .milliseconds(150),
            Code.startAuthSession: .milliseconds(100), Code.load: .milliseconds(40), Code.unseal: .milliseconds(30),
            Code.nvDefineSpace: .milliseconds(50), Code.nvWrite: .milliseconds(40), Code.nvIncrement: .milliseconds(40),
            Code.contextLoad: .milliseconds(30), Code.contextSave: .milliseconds(30),
        ])

    private enum Code {
        static let nvDefineSpace: UInt32 = 0x12A
        static let createPrimary: UInt32 = 0x131
        static let nvIncrement: UInt32 = 0x134
        static let nvWrite: UInt32 = 0x137
        static let create: UInt32 = 0x153
        static let load: UInt32 = 0x157
        static let unseal: UInt32 = 0x15E
        static let contextLoad: UInt32 = 0x161
        static let contextSave: UInt32 = 0x162
        static let startAuthSession: UInt32 = 0x176
    }
}
