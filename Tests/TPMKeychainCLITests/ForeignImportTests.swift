import Foundation
import KeychainTransfer
import KeychainVocabulary
import TPMKeychain
import TPMKeychainTesting
import Testing
import ToolSupport

#if canImport(Glibc)
import Glibc
#endif

/// The readers of other keyrings' exports: the CSV parser, the password managers' CSV and JSON
/// with each exporter's own header, and a real `pass` store decrypted by gpg with a throwaway key.
@Suite("readers of other keyrings' exports")
struct ForeignImportTests {
    // MARK: CSV

    @Test("CSV: quoted commas, doubled quotes and line breaks, CRLF, empty fields; empty lines ignored")
    func csvQuoting() throws {
        let text = "a,b,c\r\n\"x, y\",\"say \"\"hi\"\"\",\"one\r\ntwo\nthree\"\r\nplain,,\"\"\r\n\r\n\n"
        let table = try CSVTable(parsing: text)
        #expect(table.header == ["a", "b", "c"])
        #expect(table.rows == [["x, y", "say \"hi\"", "one\r\ntwo\nthree"], ["plain", "", ""]])
        // The second record starts on line 5: the first one's quoted field spans lines 2 to 4.
        #expect(table.rowLines == [2, 5])
    }

    @Test("CSV: LF line ends, a UTF-8 byte order mark, no final newline, an empty last field")
    func csvByteOrderMark() throws {
        let table = try CSVTable(parsing: "\u{FEFF}name,password\nsite,pw\n\nother,")
        #expect(table.header == ["name", "password"])
        #expect(table.rows == [["site", "pw"], ["other", ""]])
        #expect(table.rowLines == [2, 4])
    }

    @Test(
        "CSV: a wrong field count, an unterminated quote, text after a closing quote and an empty text are errors naming the line, never the content"
    )
    func csvErrors() throws {
        let wrongCount = try #require(csvTableError("a,b\n1,2\n\nsecret-3\n"))
        #expect(wrongCount.code == .malformedInput)
        #expect(wrongCount.message.contains("line 4"), "\(wrongCount)")
        #expect(!wrongCount.message.contains("secret-3"))

        let unterminated = try #require(csvTableError("a,b\n1,2\n3,\"never closed\n4,5\n"))
        #expect(unterminated.code == .malformedInput)
        #expect(unterminated.message.contains("line 3"), "\(unterminated)")
        #expect(!unterminated.message.contains("never closed"))

        let afterQuote = try #require(csvTableError("a,b\n1,2\n\"x\"y,2\n"))
        #expect(afterQuote.message.contains("line 3"), "\(afterQuote)")

        let empty = try #require(csvTableError("\u{FEFF}\r\n\n"))
        #expect(empty.code == .malformedInput)
    }

    // MARK: Password managers' CSV

    @Test(
        "Chrome and Edge CSV: URLs become internet passwords (host, protocol, port, path), the rest generic passwords")
    func chromeCSV() throws {
        let csv = """
            name,url,username,password,note
            example.com,https://Example.com/login?next=1,alice,pw-1,
            My router,http://192.168.1.1:8080/,admin,"pw,2",rotated monthly
            App without URL,,bob,pw-3,
            """
        let report = try PasswordManagerExport.items(csv: csv)
        #expect(report.skipped.isEmpty, "\(report.skipped)")
        try #require(report.items.count == 3)

        let web = report.items[0]
        #expect(web.itemClass == .internetPassword)
        #expect(web.accessibility == .whenUnlocked)
        #expect(web.attributes.string(AttributeTag.server) == "example.com")
        #expect(web.attributes[AttributeTag.protocol] == Array("htps".utf8))
        #expect(web.attributes[AttributeTag.port] == InternetPasswordAttributes.port(nil))
        #expect(web.attributes.string(AttributeTag.path) == "/login")
        #expect(web.attributes.string(AttributeTag.account) == "alice")
        #expect(web.attributes.string(AttributeTag.label) == "example.com")
        #expect(web.attributes[AttributeTag.comment] == nil)
        #expect(web.attributes[AttributeTag.creationDate] == nil)
        #expect(web.attributes[AttributeTag.modificationDate] == nil)
        #expect(web.value == ItemValue(kind: .string, bytes: Array("pw-1".utf8)))

        let router = report.items[1]
        #expect(router.itemClass == .internetPassword)
        #expect(router.attributes.string(AttributeTag.server) == "192.168.1.1")
        #expect(router.attributes[AttributeTag.protocol] == Array("http".utf8))
        #expect(router.attributes[AttributeTag.port] == InternetPasswordAttributes.port(8080))
        #expect(InternetPasswordAttributes.port(in: router.attributes) == 8080)
        #expect(router.attributes[AttributeTag.path] == nil)
        #expect(router.attributes.string(AttributeTag.label) == "My router")
        #expect(router.attributes.string(AttributeTag.comment) == "rotated monthly")
        #expect(router.value == ItemValue(kind: .string, bytes: Array("pw,2".utf8)))

        let app = report.items[2]
        #expect(app.itemClass == .genericPassword)
        #expect(app.attributes.string(AttributeTag.service) == "App without URL")
        #expect(app.attributes.string(AttributeTag.label) == "App without URL")
        #expect(app.attributes.string(AttributeTag.account) == "bob")
        #expect(app.attributes[AttributeTag.server] == nil)
        #expect(app.value == ItemValue(kind: .string, bytes: Array("pw-3".utf8)))
    }

    @Test("Firefox CSV: no name column, so the host labels the item; httpRealm and the rest ignored")
    func firefoxCSV() throws {
        let csv = """
            "url","username","password","httpRealm","formActionOrigin","guid","timeCreated","timeLastUsed","timePasswordChanged"
            "https://accounts.example.org","carol","p""w,3",,"https://accounts.example.org","{0b6f3c1e-0000-4000-8000-000000000001}","1700000000000","1700000000000","1700000000000"
            "https://mail.example.org:8443","dan","pw-4","Mail Realm",,"{0b6f3c1e-0000-4000-8000-000000000002}","1700000000000","1700000000000","1700000000000"
            """
        let report = try PasswordManagerExport.items(csv: csv)
        #expect(report.skipped.isEmpty, "\(report.skipped)")
        try #require(report.items.count == 2)

        let accounts = report.items[0]
        #expect(accounts.itemClass == .internetPassword)
        #expect(accounts.attributes.string(AttributeTag.server) == "accounts.example.org")
        #expect(accounts.attributes.string(AttributeTag.label) == "accounts.example.org")
        #expect(accounts.attributes.string(AttributeTag.account) == "carol")
        #expect(accounts.attributes[AttributeTag.path] == nil)
        #expect(accounts.value == ItemValue(kind: .string, bytes: Array("p\"w,3".utf8)))

        let mail = report.items[1]
        #expect(mail.attributes.string(AttributeTag.server) == "mail.example.org")
        #expect(mail.attributes[AttributeTag.protocol] == Array("htps".utf8))
        #expect(InternetPasswordAttributes.port(in: mail.attributes) == 8443)
        #expect(mail.attributes[AttributeTag.securityDomain] == nil)
        #expect(mail.attributes.string(AttributeTag.account) == "dan")
    }

    @Test("Bitwarden CSV: logins read, other types, empty passwords and rows naming nothing skipped with their lines")
    func bitwardenCSV() throws {
        let csv = """
            folder,favorite,type,name,notes,fields,reminder,login_uri,login_username,login_password,login_totp
            ,,login,GitHub,,,,https://github.com,erin,pw-5,
            Personal,1,note,Recovery codes,secret-note-text,,,,,,
            ,,login,Bare host,,,,example.net,frank,pw-6,
            ,,login,No password,,,,https://x.example,gina,,
            ,,login,,,,,,henry,pw-7,
            """
        let report = try PasswordManagerExport.items(csv: csv)
        try #require(report.items.count == 2)

        let github = report.items[0]
        #expect(github.itemClass == .internetPassword)
        #expect(github.attributes.string(AttributeTag.server) == "github.com")
        #expect(github.attributes[AttributeTag.protocol] == Array("htps".utf8))
        #expect(github.attributes.string(AttributeTag.label) == "GitHub")
        #expect(github.attributes.string(AttributeTag.account) == "erin")
        #expect(github.value == ItemValue(kind: .string, bytes: Array("pw-5".utf8)))

        // A bare host is read as https://example.net, but no protocol is claimed for it.
        let bare = report.items[1]
        #expect(bare.itemClass == .internetPassword)
        #expect(bare.attributes.string(AttributeTag.server) == "example.net")
        #expect(bare.attributes[AttributeTag.protocol] == nil)
        #expect(bare.attributes.string(AttributeTag.label) == "Bare host")

        #expect(report.skipped.map(\.row) == [2, 4, 5])
        try #require(report.skipped.count == 3)
        #expect(report.skipped[0].reason.contains("line 3") && report.skipped[0].reason.contains("\"note\""))
        #expect(report.skipped[1].reason.contains("line 5") && report.skipped[1].reason.contains("no password"))
        #expect(report.skipped[2].reason.contains("line 6"))
        for skipped in report.skipped {
            #expect(!skipped.reason.contains("secret-note-text") && !skipped.reason.contains("pw-"), "\(skipped)")
        }
    }

    @Test("KeePassXC and 1Password CSV: Title, URL with port and path, multi-line Notes into the comment")
    func keePassXCAndOnePasswordCSV() throws {
        let keePassXC = """
            "Group","Title","Username","Password","URL","Notes","TOTP","Icon","Last Modified","Created"
            "Root","Bank","ivy","pw-8","https://bank.example:8443/app/","first line
            second line","","0","2024-01-01T00:00:00Z","2024-01-01T00:00:00Z"
            "Root/Home","Wi-Fi","","pw-9","","","","0","2024-01-01T00:00:00Z","2024-01-01T00:00:00Z"
            """
        let report = try PasswordManagerExport.items(csv: keePassXC)
        #expect(report.skipped.isEmpty, "\(report.skipped)")
        try #require(report.items.count == 2)

        let bank = report.items[0]
        #expect(bank.itemClass == .internetPassword)
        #expect(bank.attributes.string(AttributeTag.server) == "bank.example")
        #expect(bank.attributes[AttributeTag.port] == InternetPasswordAttributes.port(8443))
        #expect(bank.attributes.string(AttributeTag.path) == "/app/")
        #expect(bank.attributes.string(AttributeTag.label) == "Bank")
        #expect(bank.attributes.string(AttributeTag.account) == "ivy")
        #expect(bank.attributes.string(AttributeTag.comment) == "first line\nsecond line")
        #expect(bank.value == ItemValue(kind: .string, bytes: Array("pw-8".utf8)))

        let wifi = report.items[1]
        #expect(wifi.itemClass == .genericPassword)
        #expect(wifi.attributes.string(AttributeTag.service) == "Wi-Fi")
        #expect(wifi.attributes.string(AttributeTag.account) == "")
        #expect(wifi.value == ItemValue(kind: .string, bytes: Array("pw-9".utf8)))

        let onePassword = try PasswordManagerExport.items(
            csv: "Title,Url,Username,Password,Notes\nMail,mail.example.com,jack,pw-10,\n")
        try #require(onePassword.items.count == 1)
        #expect(onePassword.items[0].itemClass == .internetPassword)
        #expect(onePassword.items[0].attributes.string(AttributeTag.server) == "mail.example.com")
        #expect(onePassword.items[0].attributes.string(AttributeTag.label) == "Mail")
        #expect(onePassword.items[0].attributes.string(AttributeTag.account) == "jack")
    }

    @Test("CSV: no password column is an error; a note over 4096 bytes skips its row instead of being cut")
    func csvPasswordColumnAndNoteLimit() throws {
        let noPassword = try #require(exportCSVError("name,url,username\nsite,https://a.example,kim\n"))
        #expect(noPassword.code == .unrecognizedFormat)
        #expect(noPassword.message.contains("password"), "\(noPassword)")

        let tooLong = String(repeating: "n", count: 4097)
        let exactly = String(repeating: "\u{E9}", count: 2048) // 4096 UTF-8 bytes
        let report = try PasswordManagerExport.items(
            csv: "name,password,notes\nlong,pw-11,\(tooLong)\nexact,pw-12,\(exactly)\n")
        try #require(report.items.count == 1)
        #expect(report.items[0].attributes.string(AttributeTag.service) == "exact")
        #expect(report.items[0].attributes.string(AttributeTag.comment) == exactly)
        try #require(report.skipped.count == 1)
        #expect(report.skipped[0].row == 1)
        #expect(report.skipped[0].reason.contains("line 2") && report.skipped[0].reason.contains("4097"))
        #expect(!report.skipped[0].reason.contains("nnnn"))
    }

    // MARK: JSON

    @Test("Bitwarden JSON: logins with their first URI; other types and logins without a password skipped")
    func bitwardenJSON() throws {
        let json = """
            {"encrypted": false, "folders": [], "items": [
              {"id": "1", "type": 1, "name": "GitLab", "notes": "kept as the comment", "favorite": false,
               "login": {"username": "lena", "password": "pw-13", "totp": null,
                         "uris": [{"match": null, "uri": "https://gitlab.example.com/users/sign_in"},
                                  {"match": null, "uri": "https://other.example"}]}},
              {"id": "2", "type": 2, "name": "Recovery", "notes": "secret-note-text", "secureNote": {"type": 0}},
              {"id": "3", "type": 1, "name": "Local tool", "notes": null,
               "login": {"username": "max", "password": "pw-14", "uris": []}},
              {"id": "4", "type": 1, "name": "Empty", "login": {"username": "ned", "password": null}}
            ]}
            """
        let report = try PasswordManagerExport.items(json: Array(json.utf8))
        try #require(report.items.count == 2)

        let gitlab = report.items[0]
        #expect(gitlab.itemClass == .internetPassword)
        #expect(gitlab.attributes.string(AttributeTag.server) == "gitlab.example.com")
        #expect(gitlab.attributes[AttributeTag.protocol] == Array("htps".utf8))
        #expect(gitlab.attributes.string(AttributeTag.path) == "/users/sign_in")
        #expect(gitlab.attributes.string(AttributeTag.label) == "GitLab")
        #expect(gitlab.attributes.string(AttributeTag.account) == "lena")
        #expect(gitlab.attributes.string(AttributeTag.comment) == "kept as the comment")
        #expect(gitlab.value == ItemValue(kind: .string, bytes: Array("pw-13".utf8)))

        let local = report.items[1]
        #expect(local.itemClass == .genericPassword)
        #expect(local.attributes.string(AttributeTag.service) == "Local tool")
        #expect(local.attributes.string(AttributeTag.account) == "max")
        #expect(local.attributes[AttributeTag.comment] == nil)

        #expect(report.skipped.map(\.row) == [2, 4])
        try #require(report.skipped.count == 2)
        #expect(report.skipped[0].reason.contains("item 2"), "\(report.skipped[0])")
        #expect(!report.skipped[0].reason.contains("secret-note-text"))
        #expect(report.skipped[1].reason.contains("item 4") && report.skipped[1].reason.contains("no password"))
    }

    @Test("Bitwarden JSON: an encrypted export, and a value of the wrong type, are errors that say where")
    func bitwardenJSONErrors() throws {
        let encrypted = try #require(
            exportJSONError(
                #"{"encrypted": true, "passwordProtected": true, "salt": "c2FsdA==", "kdfType": 0, "kdfIterations": 600000, "data": "2.abc"}"#
            ))
        #expect(encrypted.code == .unrecognizedFormat)
        #expect(encrypted.message.contains("encrypted"), "\(encrypted)")

        let wrongType = try #require(
            exportJSONError(#"{"items": [{"type": 1, "name": "x", "login": {"password": 987654}}]}"#))
        #expect(wrongType.code == .malformedInput)
        #expect(wrongType.message.contains("items[0].login.password"), "\(wrongType)")
        #expect(!wrongType.message.contains("987654"))

        let notJSON = try #require(exportJSONError("name,password\n"))
        #expect(notJSON.code == .unrecognizedFormat)
        let broken = try #require(exportJSONError("[{\"password\": \"pw-x\""))
        #expect(broken.code == .malformedInput)
        #expect(!broken.message.contains("pw-x"))
    }

    @Test("flat JSON: an array of objects keyed by the CSV column names, in any case")
    func flatJSON() throws {
        let json = """
            [
              {"Title": "Forum", "URL": "https://forum.example/", "Username": "olga", "Password": "pw-15", "Group": "Root"},
              {"name": "CLI token", "password": "pw-16", "notes": "scoped to CI", "totp": null},
              {"title": "Nothing", "password": ""},
              {"name": "Odd", "password": 12345}
            ]
            """
        let report = try PasswordManagerExport.items(json: Array(json.utf8))
        try #require(report.items.count == 2)

        let forum = report.items[0]
        #expect(forum.itemClass == .internetPassword)
        #expect(forum.attributes.string(AttributeTag.server) == "forum.example")
        #expect(forum.attributes[AttributeTag.path] == nil)
        #expect(forum.attributes.string(AttributeTag.label) == "Forum")
        #expect(forum.attributes.string(AttributeTag.account) == "olga")
        #expect(forum.value == ItemValue(kind: .string, bytes: Array("pw-15".utf8)))

        let token = report.items[1]
        #expect(token.itemClass == .genericPassword)
        #expect(token.attributes.string(AttributeTag.service) == "CLI token")
        #expect(token.attributes.string(AttributeTag.comment) == "scoped to CI")
        #expect(token.value == ItemValue(kind: .string, bytes: Array("pw-16".utf8)))

        #expect(report.skipped.map(\.row) == [3, 4])
        try #require(report.skipped.count == 2)
        #expect(report.skipped[0].reason.contains("item 3") && report.skipped[0].reason.contains("no password"))
        #expect(report.skipped[1].reason.contains("item 4") && report.skipped[1].reason.contains("not a string"))
        #expect(!report.skipped[1].reason.contains("12345"))

        let noPasswordKey = try #require(exportJSONError(#"[{"name": "a", "url": "https://a.example"}]"#))
        #expect(noPasswordKey.code == .unrecognizedFormat)
    }

    // MARK: pass

    @Test(
        "pass store: entries decrypted by gpg with a throwaway key; dot-directories, other files and linked directories not read; the store unchanged"
    )
    func passStore() throws {
        let gpg = "/usr/bin/gpg"
        let home = try makeGnuPGHomeWithKey(gpg: gpg)
        defer { removeGnuPGHome(home) }
        let gnupg = ["GNUPGHOME": home]

        let store = try makeScratchDirectory("pass-store")
        defer { try? FileManager.default.removeItem(atPath: store) }
        try Data("test@example.invalid\n".utf8).write(to: URL(fileURLWithPath: store + "/.gpg-id"))
        let entries: [(path: String, text: String)] = [
            ("github.gpg", "s3cret-one\n"),
            ("email/work.gpg", "p@ss two\nlogin: alice\nurl: https://mail.example\nrecovery: 1234-5678\n"),
            ("web/shop.gpg", "pw three\nnotes: none\nUser:  bob \nlogin: later\n"),
            (".git/hidden.gpg", "never read\n"),
        ]
        for entry in entries {
            let path = store + "/" + entry.path
            try FileManager.default.createDirectory(
                atPath: URL(fileURLWithPath: path).deletingLastPathComponent().path, withIntermediateDirectories: true)
            _ = try SystemTool.output(
                gpg, ["--batch", "--yes", "--trust-model", "always", "-r", "test@example.invalid", "-o", path, "-e"],
                environment: gnupg, input: Data(entry.text.utf8))
        }
        // Not items: a damaged entry (skipped, with gpg's reason), a file of another kind, and a
        // symbolic link to a directory (not followed, or email/work would be read twice).
        try Data("not OpenPGP data\n".utf8).write(to: URL(fileURLWithPath: store + "/broken.gpg"))
        try Data("readme\n".utf8).write(to: URL(fileURLWithPath: store + "/README.txt"))
        try FileManager.default.createSymbolicLink(atPath: store + "/linked", withDestinationPath: store + "/email")
        let before = try passStoreSnapshot(store)

        var environment = ProcessInfo.processInfo.environment
        environment["GNUPGHOME"] = home
        var progress: [[Int]] = []
        let report = try PassStore.items(directory: store, gpg: gpg, environment: environment) { done, total in
            progress.append([done, total])
        }

        #expect(progress == [[0, 4], [1, 4], [2, 4], [3, 4], [4, 4]])
        #expect(
            report.items.map { $0.attributes.string(AttributeTag.service) } == ["email/work", "github", "web/shop"])
        try #require(report.items.count == 3)
        for item in report.items {
            #expect(item.itemClass == .genericPassword)
            #expect(item.accessibility == .whenUnlocked)
            #expect(item.value.kind == .string)
            #expect(item.attributes.string(AttributeTag.label) == item.attributes.string(AttributeTag.service))
            // Only the login line's user name leaves the value: never another line.
            for tag in item.attributes.tags {
                let text = item.attributes.string(tag) ?? ""
                #expect(!text.contains("1234-5678") && !text.contains("s3cret") && !text.contains("none"), "\(tag)")
            }
        }
        let work = report.items[0]
        #expect(work.attributes.string(AttributeTag.account) == "alice")
        #expect(
            work.value.bytes == Array("p@ss two\nlogin: alice\nurl: https://mail.example\nrecovery: 1234-5678".utf8))
        let github = report.items[1]
        #expect(github.attributes.string(AttributeTag.account) == "")
        #expect(github.value.bytes == Array("s3cret-one".utf8))
        let shop = report.items[2]
        #expect(shop.attributes.string(AttributeTag.account) == "bob")
        #expect(shop.value.bytes == Array("pw three\nnotes: none\nUser:  bob \nlogin: later".utf8))

        try #require(report.skipped.count == 1)
        #expect(report.skipped[0].row == 1)
        #expect(report.skipped[0].reason.hasPrefix("broken: ") && report.skipped[0].reason.contains("gpg"))

        #expect(try passStoreSnapshot(store) == before, "the pass store was modified")
    }

    @Test(
        "pass store (review 3, N13): an entry that is a symbolic link is not read, a file over the entry limit is not handed to gpg, and a plaintext over an item's limit is refused; each with its reason"
    )
    func passStoreHostileEntries() throws {
        let gpg = "/usr/bin/gpg"
        let home = try makeGnuPGHomeWithKey(gpg: gpg)
        defer { removeGnuPGHome(home) }
        let store = try makeScratchDirectory("pass-store-hostile")
        let elsewhere = try makeScratchDirectory("pass-store-elsewhere")
        defer {
            try? FileManager.default.removeItem(atPath: store)
            try? FileManager.default.removeItem(atPath: elsewhere)
        }
        func encrypt(_ plaintext: Data, to path: String) throws {
            _ = try SystemTool.output(
                gpg, ["--batch", "--yes", "--trust-model", "always", "-r", "test@example.invalid", "-o", path, "-e"],
                environment: ["GNUPGHOME": home], input: plaintext)
        }
        // A file of someone else's, linked into the store as an entry: it decrypts, so only the
        // link can keep it out.
        try encrypt(Data("not the store's\n".utf8), to: elsewhere + "/outside.gpg")
        try FileManager.default.createSymbolicLink(
            atPath: store + "/linked.gpg", withDestinationPath: elsewhere + "/outside.gpg")
        try encrypt(Data("kept\n".utf8), to: store + "/good.gpg")
        // Compressed zeros: a few KB of file, more plaintext than an item holds.
        try encrypt(Data(count: ItemValue.maximumSize + 4096), to: store + "/bomb.gpg")
        // Over the entry limit before any decryption (gpg would call it damaged).
        _ = FileManager.default.createFile(atPath: store + "/huge.gpg", contents: nil)
        let huge = try FileHandle(forWritingTo: URL(fileURLWithPath: store + "/huge.gpg"))
        try huge.truncate(atOffset: UInt64(PassStore.maximumEntryFileSize + 1))
        try huge.close()

        var environment = ProcessInfo.processInfo.environment
        environment["GNUPGHOME"] = home
        let report = try PassStore.items(directory: store, gpg: gpg, environment: environment)
        #expect(report.items.map { $0.value.bytes } == [Array("kept".utf8)], "\(report.items.count) items")
        let reasons = report.skipped.map(\.reason)
        #expect(reasons.count == 3, "\(reasons)")
        #expect(reasons.contains { $0.hasPrefix("bomb: ") && $0.contains("more than an item holds") }, "\(reasons)")
        #expect(reasons.contains { $0.hasPrefix("huge: ") && $0.contains("not decrypted") }, "\(reasons)")
        #expect(reasons.contains { $0.hasPrefix("linked: ") && $0.contains("symbolic link") }, "\(reasons)")
    }

    @Test("pass store: a gpg that cannot be found, and a store that is not a directory, are errors")
    func passStoreErrors() throws {
        let store = try makeScratchDirectory("pass-store-errors")
        defer { try? FileManager.default.removeItem(atPath: store) }
        try Data("x".utf8).write(to: URL(fileURLWithPath: store + "/entry.gpg"))

        let missingPath = try #require(passStoreError(store, gpg: store + "/no-such-gpg"))
        #expect(missingPath.code == .toolUnavailable, "\(missingPath)")
        let missingName = try #require(passStoreError(store, gpg: "no-such-gpg", environment: ["PATH": store]))
        #expect(missingName.code == .toolUnavailable, "\(missingName)")
        let notDirectory = try #require(passStoreError(store + "/entry.gpg", gpg: "/usr/bin/gpg"))
        #expect(notDirectory.code == .unreadableSource, "\(notDirectory)")
        let absent = try #require(passStoreError(store + "/absent", gpg: "/usr/bin/gpg"))
        #expect(absent.code == .unreadableSource, "\(absent)")
    }
}

// MARK: Helpers

private func csvTableError(_ text: String) -> ForeignImportError? {
    do {
        _ = try CSVTable(parsing: text)
        return nil
    } catch {
        return error
    }
}

private func exportCSVError(_ text: String) -> ForeignImportError? {
    do {
        _ = try PasswordManagerExport.items(csv: text)
        return nil
    } catch {
        return error
    }
}

private func exportJSONError(_ text: String) -> ForeignImportError? {
    do {
        _ = try PasswordManagerExport.items(json: Array(text.utf8))
        return nil
    } catch {
        return error
    }
}

private func passStoreError(
    _ directory: String, gpg: String, environment: [String: String]? = nil
)
    -> ForeignImportError?
{
    do {
        _ = try PassStore.items(directory: directory, gpg: gpg, environment: environment)
        return nil
    } catch {
        return error
    }
}

/// A private GnuPG home (mode 0700). Short and under /tmp: gpg-agent puts its sockets in the home
/// when /run/user/<uid> does not exist, and a socket's path has at most 107 bytes.
/// A GnuPG home with a throwaway key for test@example.invalid (no passphrase).
func makeGnuPGHomeWithKey(gpg: String) throws -> String {
    guard FileManager.default.isExecutableFile(atPath: gpg) else {
        throw CLIError("gpg is missing: install gnupg (.ci/install-dependencies)")
    }
    let home = try makeGnuPGHome()
    _ = try SystemTool.output(
        gpg,
        [
            "--batch", "--passphrase", "", "--quick-gen-key", "Test <test@example.invalid>", "default", "default",
            "never",
        ],
        environment: ["GNUPGHOME": home])
    return home
}

/// The agent gpg started for `home`, then the home itself.
func removeGnuPGHome(_ home: String) {
    _ = try? SystemTool.output("/usr/bin/gpgconf", ["--kill", "all"], environment: ["GNUPGHOME": home])
    try? FileManager.default.removeItem(atPath: home)
}

func makeGnuPGHome() throws -> String {
    var template = Array("/tmp/tpmkc-gnupg-XXXXXX".utf8CString)
    let made = template.withUnsafeMutableBufferPointer { buffer in buffer.baseAddress.flatMap { mkdtemp($0) } }
    guard made != nil else { throw CLIError("mkdtemp for a GnuPG home failed: errno \(errno)") }
    let path = String(decoding: template.prefix { $0 != 0 }.map { UInt8(truncatingIfNeeded: $0) }, as: UTF8.self)
    guard chmod(path, 0o700) == 0 else { throw CLIError("chmod 700 \(path) failed: errno \(errno)") }
    return path
}

/// One file of a snapshot: its type, modification time, and contents or link target.
private struct PassStoreFileState: Equatable {
    var type: mode_t
    var modified: [Int]
    var contents: Data?
    var linkDestination: String?
}

/// Every file, directory and link under `root` (links not followed), by relative path.
private func passStoreSnapshot(_ root: String) throws -> [String: PassStoreFileState] {
    var states: [String: PassStoreFileState] = [:]
    var pending = [""]
    while let relative = pending.popLast() {
        let path = relative.isEmpty ? root : root + "/" + relative
        var status = stat()
        guard lstat(path, &status) == 0 else { throw CLIError("cannot lstat \(path): errno \(errno)") }
        let type = status.st_mode & S_IFMT
        var state = PassStoreFileState(
            type: type, modified: [Int(status.st_mtim.tv_sec), Int(status.st_mtim.tv_nsec)], contents: nil,
            linkDestination: nil)
        switch type {
        case S_IFDIR:
            for name in try FileManager.default.contentsOfDirectory(atPath: path) {
                pending.append(relative.isEmpty ? name : relative + "/" + name)
            }
        case S_IFREG:
            state.contents = try Data(contentsOf: URL(fileURLWithPath: path))
        case S_IFLNK:
            state.linkDestination = try FileManager.default.destinationOfSymbolicLink(atPath: path)
        default:
            break
        }
        states[relative] = state
    }
    return states
}
