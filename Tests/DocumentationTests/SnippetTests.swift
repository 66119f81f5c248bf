import Foundation
import Testing

/// The docs' Swift blocks are in Snippets.swift, so the compiler checks them.
@Suite struct SnippetTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent()

    /// Lines as compared: trimmed, without blank lines and without `import` lines (the mirror
    /// imports once at the top), and with the trailing `as Any` the mirror adds to silence
    /// warnings about printing optionals.
    static func normalised(_ text: some StringProtocol) -> [String] {
        text.split(separator: "\n", omittingEmptySubsequences: false)
            .map { $0.trimmingCharacters(in: .whitespaces).replacingOccurrences(of: " as Any", with: "") }
            .filter { !$0.isEmpty && !$0.hasPrefix("import ") }
    }

    /// The ```swift blocks of a Markdown file, except Package.swift fragments (no module compiles those).
    static func swiftBlocks(of path: String) throws -> [String] {
        let text = try String(contentsOf: root.appendingPathComponent(path), encoding: .utf8)
        var blocks: [String] = []
        var current: [Substring]?
        for line in text.split(separator: "\n", omittingEmptySubsequences: false) {
            if current == nil, line.trimmingCharacters(in: .whitespaces) == "```swift" {
                current = []
            } else if current != nil, line.trimmingCharacters(in: .whitespaces) == "```" {
                let block = current!.joined(separator: "\n")
                if !block.hasPrefix("// Package.swift") { blocks.append(block) }
                current = nil
            } else {
                current?.append(line)
            }
        }
        return blocks
    }

    @Test(
        "every Swift block of README.md and the guides is compiled, verbatim, in Snippets.swift",
        arguments: ["README.md", "docs/RECIPES.md", "docs/PORTING.md"])
    func blocksAreMirrored(_ document: String) throws {
        let mirror = Self.normalised(
            try String(
                contentsOf: Self.root.appendingPathComponent("Tests/DocumentationTests/Snippets.swift"),
                encoding: .utf8))
        let blocks = try Self.swiftBlocks(of: document)
        #expect(!blocks.isEmpty, "found no Swift blocks in \(document)")
        for block in blocks {
            let lines = Self.normalised(block)
            let found = mirror.indices.contains { start in
                start + lines.count <= mirror.count && Array(mirror[start..<start + lines.count]) == lines
            }
            #expect(found, "\(document): this block is not in Snippets.swift as written:\n\(block)")
        }
    }
}
