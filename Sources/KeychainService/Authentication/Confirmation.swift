/// A person's answer to "may this program read a secret of this keyring?".
package enum Confirmation: Sendable, Equatable {
    case refused
    /// Yes, for the read that asked.
    case once
    /// Yes, and from now on: the program, as it is now (its path and its file's hash), is
    /// granted the keyring (a grant, ``Grant``), across restarts.
    case remembered
    /// Yes, for this login session (a grant with that lease).
    case forTheSession

    package var allows: Bool { self != .refused }
}
