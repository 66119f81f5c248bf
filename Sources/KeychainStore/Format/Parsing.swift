import KeychainVocabulary

extension KeychainError {
    /// Runs a parser of bytes read from disk, which anyone who can write there may have made: what
    /// the parser reports as a `KeychainError` passes as it is, and anything else thrown on the way
    /// (a `WireFormatError`: bytes that end early, a size over its limit; a TPM structure the TPM
    /// layer refused) is tampering, in the words `damaged` gives for it.
    static func parsing<R>(
        _ parse: () throws -> R, damaged: (_ cause: any Error) -> KeychainError
    ) throws(KeychainError) -> R {
        do {
            return try parse()
        } catch let error as KeychainError {
            throw error
        } catch {
            throw damaged(error)
        }
    }
}
