// What a spawned child inherits: its standard streams and nothing else.
//
// libtss2's swtpm and mssim TCTIs open their per-command sockets without SOCK_CLOEXEC. A child
// spawned by another thread while such a socket is open keeps a copy, so the connection outlives
// the TSS's close(), and swtpm, which serves one command connection at a time, waits on it and
// never accepts the TSS's next command. Every posix_spawn in this project closes the rest.

#if canImport(Glibc)
package import Glibc
#elseif canImport(Musl)
package import Musl
#endif

private typealias AddCloseFrom = @convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>?, Int32) -> Int32

// glibc 2.34+ exports it, but Swift's Glibc module is imported without _GNU_SOURCE, so it is
// resolved at run time. A nil handle is RTLD_DEFAULT: the global scope, where libc always is.
// C function pointers are immutable and callable from any thread.
private let addCloseFrom: AddCloseFrom? = dlsym(nil, "posix_spawn_file_actions_addclosefrom_np")
    .map { unsafeBitCast($0, to: AddCloseFrom.self) }

/// Adds to `actions` the closing of every descriptor from 3 up, so that the child inherits only
/// what the other actions set up on 0, 1 and 2.
///
/// Where libc lacks posix_spawn_file_actions_addclosefrom_np (glibc before 2.34), each descriptor
/// open now is closed instead; one another thread opens between this call and the spawn may
/// still leak.
///
/// - Throws: `Errno` from the posix_spawn_file_actions family.
package func closeInheritedDescriptors(_ actions: inout posix_spawn_file_actions_t) throws(Errno) {
    if let addCloseFrom {
        try spawnResult { addCloseFrom(&actions, 3) }
        return
    }
    // glibc's posix_spawn ignores closing a descriptor that is no longer open.
    for descriptor in openDescriptors() where descriptor > 2 {
        try spawnResult { posix_spawn_file_actions_addclose(&actions, descriptor) }
    }
}

private func openDescriptors() -> [Int32] {
    guard let directory = opendir("/proc/self/fd") else { return [] }
    defer { closedir(directory) }
    var descriptors: [Int32] = []
    while let entry = readdir(directory) {
        let name = withUnsafeBytes(of: entry.pointee.d_name) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
        if let descriptor = Int32(name), descriptor != dirfd(directory) { descriptors.append(descriptor) }
    }
    return descriptors
}
