import SystemCalls

#if canImport(Glibc)
import Glibc
#endif

/// Keeps each TCTI library loaded for the life of the process, and hands the TCTI loader its
/// file name rather than the short name users write.
///
/// Given `swtpm:…`, `Tss2_TctiLdr_Initialize` first looks for a library file named `swtpm` (a
/// search of ld.so.cache and the library directories that fails), then `dlopen`s
/// `libtss2-tcti-swtpm.so.0`, and `Tss2_TctiLdr_Finalize` unloads it again. Every connection
/// paid for both: about 160 µs of the 250 µs a swtpm TCTI takes to initialise and finalise
/// (measured 2026-11-27). Loaded once here with RTLD_NODELETE, the library stays mapped, and
/// the loader's `dlopen` of its file name only counts a reference.
enum TCTILibraries {
    private static let resolved = Locked<[String: String]>([:])

    /// The configuration string to give `Tss2_TctiLdr_Initialize` for `tcti`: the same TCTI and
    /// options, named by the library file once that file is loaded; `tcti` unchanged when it
    /// already names a file, names no TCTI library, or is empty (the loader's default search).
    static func loaderConfiguration(for tcti: String) -> String {
        let name: Substring
        let options: Substring?
        if let colon = tcti.firstIndex(of: ":") {
            name = tcti[..<colon]
            options = tcti[tcti.index(after: colon)...]
        } else {
            name = tcti[...]
            options = nil
        }
        guard !name.isEmpty, !name.contains("/"), !name.contains(".so") else { return tcti }
        guard let library = library(named: String(name)) else { return tcti }
        // String(options), not the Substring: String + Substring is the generic `+`, whose first
        // use in a process looks a conformance up over the whole binary (0.3 ms of a CLI lookup).
        return options.map { library + ":" + String($0) } ?? library
    }

    /// `libtss2-tcti-<name>.so.0` once it is loaded for good; nil when it cannot be loaded, so
    /// that the TCTI loader runs its own search and reports its own error.
    private static func library(named name: String) -> String? {
        if let known = resolved.withLock({ $0[name] }) { return known }
        let file = "libtss2-tcti-\(name).so.0"
        // Never closed: RTLD_NODELETE keeps it mapped past the loader's dlclose anyway.
        guard dlopen(file, RTLD_NOW | RTLD_NODELETE) != nil else { return nil }
        resolved.withLock { $0[name] = file }
        return file
    }
}
