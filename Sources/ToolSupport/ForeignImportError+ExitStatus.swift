import KeychainTransfer

// How a failed read of another keyring's export ends a command.
extension ForeignImportError: ToolFailure {
    /// A source that cannot be read is missing input; a program that cannot run is unavailable;
    /// the rest is bad data.
    package var exitStatus: Int32 {
        switch code {
        case .unreadableSource: ExitStatus.noInput
        case .toolUnavailable: ExitStatus.unavailable
        default: ExitStatus.dataError
        }
    }
}
