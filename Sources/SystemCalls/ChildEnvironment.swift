#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// The environment a child process gets (the simulator, an askpass program): this process's own,
/// without the variables that carry secrets. `TPM_KEYCHAIN_OWNER_AUTH` holds the TPM owner's
/// password, which no child needs and every child would pass on further.
package enum ChildEnvironment {
    /// Variables never handed to a child.
    package static let withheld: Set<String> = ["TPM_KEYCHAIN_OWNER_AUTH"]

    /// `NAME=value` entries of this process's environment, less ``withheld``.
    package static func current() -> [String] {
        var entries: [String] = []
        var cursor = environ
        while let entry = cursor.pointee {
            let text = String(cString: entry)
            let name =
                text.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false).first.map(String.init)
                ?? text
            if !withheld.contains(name) { entries.append(text) }
            cursor += 1
        }
        return entries
    }

    /// ``current()`` as a dictionary, for Foundation's `Process`.
    package static func currentDictionary() -> [String: String] {
        var dictionary: [String: String] = [:]
        for entry in current() {
            let parts = entry.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            dictionary[String(parts[0])] = parts.count > 1 ? String(parts[1]) : ""
        }
        return dictionary
    }
}
