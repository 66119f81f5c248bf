import DBus

// org.freedesktop.Secret.Prompt. No method of this version needs one: collections without access
// control unlock, lock, are created and deleted at once, and those return "/" as the prompt.
extension SecretServiceProvider {
    func promptMethod(_ call: BusMethodCall, path: String) throws(SecretServiceError) -> [BusValue] {
        throw SecretServiceError(.noSuchObject, "No prompt \(path)")
    }

    func forgetPrompts(of uniqueName: String) {}
}
