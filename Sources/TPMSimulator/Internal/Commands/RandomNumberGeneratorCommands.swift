// TPM 2.0 Part 3 §16 "Random Number Generator": TPM2_GetRandom (§16.1).

enum RandomNumberGeneratorCommands {
    static let getRandomCode: UInt32 = 0x0000_017B // TPM_CC_GetRandom

    /// TPM2_GetRandom: harmless, needs no authorization and works right after Startup, which
    /// makes it the readiness probe.
    static func getRandom(byteCount: UInt16) -> [UInt8] {
        TPMCommandBuilder(code: getRandomCode).appending(byteCount).build()
    }
}
