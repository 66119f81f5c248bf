import Foundation
import Testing
import TPMKeychain

@Suite struct SmokeTests {
    @Test func setGetRemove() throws {
        let store = try TestStore()
        let keychain = try store.keychain()
        try keychain.set("secret-token", forKey: "token")
        #expect(try keychain.get("token", as: String.self) == "secret-token")
        #expect(try keychain.contains("token"))
        #expect(try keychain.allKeys() == ["token"])
        #expect(try keychain.remove("token"))
        #expect(try keychain.get("token", as: String.self) == nil)
    }
}
