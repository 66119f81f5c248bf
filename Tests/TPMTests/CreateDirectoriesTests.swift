import Foundation
import SystemCalls
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// `createDirectories` (mkdir -p), which tries the whole path first and walks its components only
/// when a parent is missing.
@Suite struct CreateDirectoriesTests {
    private static func mode(_ path: String) throws -> mode_t {
        var status = stat()
        guard stat(path, &status) == 0 else { throw Errno(rawValue: errno) }
        return status.st_mode
    }

    @Test("Missing directories are made 0700 in order; existing ones, and an existing last one, are left as they are")
    func makesWhatIsMissing() throws {
        let base = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: base) }
        #expect(chmod(base, 0o755) == 0)

        let deep = base + "/a/b/c"
        try createDirectories(deep)
        for path in [base + "/a", base + "/a/b", deep] {
            #expect(try Self.mode(path) & S_IFMT == S_IFDIR, "\(path)")
            #expect(try Self.mode(path) & 0o7777 == 0o700, "\(path)")
        }
        #expect(try Self.mode(base) & 0o7777 == 0o755)

        // All there already: one mkdir finds it, and nothing is changed.
        #expect(chmod(deep, 0o750) == 0)
        try createDirectories(deep)
        #expect(try Self.mode(deep) & 0o7777 == 0o750)

        // A sibling under an existing parent, with a mode of the caller's choice.
        try createDirectories(base + "/a/b/d", mode: 0o711)
        #expect(try Self.mode(base + "/a/b/d") & 0o7777 == 0o711)
    }

    @Test(
        "A file in the way of a parent fails with ENOTDIR; a file at the path itself is left alone and passes (EEXIST), as before"
    )
    func fileInTheWay() throws {
        let base = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: base) }
        let file = base + "/file"
        #expect(FileManager.default.createFile(atPath: file, contents: Data([1])))
        #expect(throws: Errno(rawValue: ENOTDIR)) { try createDirectories(file + "/below") }
        #expect(throws: Errno(rawValue: ENOTDIR)) { try createDirectories(file + "/below/deeper") }
        try createDirectories(file)
        #expect(try Self.mode(file) & S_IFMT == S_IFREG)
        #expect(!FileManager.default.fileExists(atPath: file + "/below"))
    }
}
