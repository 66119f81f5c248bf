import Testing
import WireFormat

@testable import SecretService

/// The daemon's protocol pieces on their own: object paths, the text it shows people and logs.
@Suite("object paths and display text")
struct ProtocolTests {
    @Test("a store name becomes one path element of [A-Za-z0-9_], each other byte as _ and two hex digits")
    func storeNamesAsPathElements() {
        #expect(ObjectPaths.element(for: "default") == "default")
        #expect(ObjectPaths.element(for: "my keys/2") == "my_20keys_2f2")
        #expect(ObjectPaths.element(for: "é") == "_c3_a9")
        #expect(ObjectPaths.element(for: "_") == "_5f")
        let hostile = "../../x\u{0}\u{202E}"
        #expect(
            ObjectPaths.element(for: hostile).allSatisfy { $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "_") })
    }

    @Test(
        "a path names the service, a directory, a collection or item (by path or alias), a session, a prompt, or nothing"
    )
    func pathTargets() {
        let service = ObjectPaths.service
        #expect(ObjectPaths.target(of: service) == .service)
        #expect(ObjectPaths.target(of: service + "/collection") == .directory("collection"))
        #expect(ObjectPaths.target(of: service + "/collection/login") == .collection("login", alias: false))
        #expect(ObjectPaths.target(of: service + "/aliases/default") == .collection("default", alias: true))
        #expect(
            ObjectPaths.target(of: service + "/collection/login/1a2b")
                == .item("1a2b", collection: "login", alias: false))
        #expect(ObjectPaths.target(of: service + "/session/3") == .session(service + "/session/3"))
        #expect(ObjectPaths.target(of: service + "/prompt/9") == .prompt(service + "/prompt/9"))
        for unknown in [
            service + "/collection/", service + "/collection//x", service + "/collection/a/b/c", "/org/other", "/",
        ] {
            #expect(ObjectPaths.target(of: unknown) == .unknown, "\(unknown)")
        }
    }

    @Test("text shown to a person or logged cannot end its quotes, start a line, or turn the rest around")
    func displayTextIsQuotedAndEscaped() {
        #expect(DisplayText.quoted("Work mail") == "\"Work mail\"")
        #expect(DisplayText.quoted("say \"hi\" \\ bye") == "\"say \\\"hi\\\" \\\\ bye\"")
        #expect(DisplayText.quoted("a\nb\tc") == "\"a\\u{a}b\\u{9}c\"")
        // Right-to-left override, line separator, zero-width joiner: all escaped.
        #expect(DisplayText.quoted("evil\u{202E}txt.exe") == "\"evil\\u{202e}txt.exe\"")
        #expect(DisplayText.quoted("x\u{2028}y\u{200D}") == "\"x\\u{2028}y\\u{200d}\"")
        #expect(DisplayText.quoted("abcdef", limit: 3) == "\"abc…\"")
        #expect(DisplayText.quoted("abc", limit: 3) == "\"abc\"")
        #expect(DisplayText.quoted("") == "\"\"")
    }
}
