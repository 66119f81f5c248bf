import CSystemCalls

/// Small secrets kept for a while in the kernel's user keyring (keyrings(7)): readable by this
/// user's processes and no other user's, never on disk or in swap, gone after their timeout or
/// when the user's last process ends. A cache only: every failure reads as "not there".
public enum UserKeyring {
    /// Keeps `secret` under `name` for `timeoutSeconds`; false when the kernel refused.
    @discardableResult
    public static func store(_ name: String, _ secret: UnsafeRawBufferPointer, timeoutSeconds: UInt32) -> Bool {
        tk_user_keyring_store(name, secret.baseAddress, secret.count, timeoutSeconds) >= 0
    }

    /// Calls `body` with the secret under `name` when it is there and `count` bytes long; the
    /// copy `body` sees is zeroed afterwards.
    public static func read<R>(_ name: String, count: Int, _ body: (UnsafeRawBufferPointer) -> R) -> R? {
        var buffer = [UInt8](repeating: 0, count: count)
        defer { erase(&buffer) }
        let length = buffer.withUnsafeMutableBytes { tk_user_keyring_read(name, $0.baseAddress, count) }
        guard length == count else { return nil }
        return buffer.withUnsafeBytes { body($0) }
    }

    /// Removes the secret under `name`, if it is there.
    public static func remove(_ name: String) {
        _ = tk_user_keyring_remove(name)
    }
}
