import DBus
import KeychainVocabulary
import Testing

@testable import SecretService

/// What CreateCollection and CreateItem make of their properties, before any store is touched.
@Suite("CreateCollection's and CreateItem's properties")
struct NewObjectPropertiesTests {
    typealias Collection = NewCollectionProperties

    /// A property as a client sends it: in a variant.
    func given(_ entries: [String: BusValue]) -> [String: BusValue] {
        entries.mapValues { .variant($0) }
    }

    func refusal(_ properties: [String: BusValue]) -> SecretServiceError? {
        #expect(throws: SecretServiceError.self) { _ = try Collection(given(properties)) }
    }

    @Test("no properties: no label, no access control, any program, no confirmation, no properties item")
    func nothingGiven() throws {
        let properties = try Collection([:])
        #expect(properties.label == nil)
        #expect(properties.accessControl == nil)
        #expect(properties.allowedExecutables == nil)
        #expect(!properties.confirmsEachAccess)
        #expect(!properties.needsPropertiesItem)
    }

    @Test("every property read from its variant; any of the three rules needs a properties item")
    func everyPropertyRead() throws {
        let properties = try Collection(
            given([
                Collection.labelProperty: .string("Work"),
                Collection.accessControlProperty: .string("biometryCurrentSet, or,devicePasscode"),
                Collection.allowedExecutablesProperty: .array(element: "s", [.string("/usr/bin/secret-tool")]),
                Collection.confirmEachAccessProperty: .bool(true),
            ]))
        #expect(properties.label == "Work")
        #expect(properties.accessControl?.flags == [.biometryCurrentSet, .or, .devicePasscode])
        #expect(properties.allowedExecutables == ["/usr/bin/secret-tool"])
        #expect(properties.confirmsEachAccess)
        #expect(properties.needsPropertiesItem)
        for (name, value) in [
            (Collection.accessControlProperty, BusValue.string("devicePasscode")),
            (Collection.allowedExecutablesProperty, .array(element: "s", [.string("/bin/sh")])),
            (Collection.confirmEachAccessProperty, .bool(true)),
        ] {
            #expect(try Collection(given([name: value])).needsPropertiesItem, "\(name)")
        }
        #expect(try !Collection(given([Collection.labelProperty: .string("Work")])).needsPropertiesItem)
    }

    @Test("a property of the wrong type or value is InvalidArgs, naming it")
    func wrongTypesRefused() {
        let cases: [(String, BusValue, String)] = [
            (Collection.labelProperty, .uint32(1), "org.freedesktop.Secret.Collection.Label is a string"),
            (Collection.accessControlProperty, .bool(true), "org.tpmkeychain.Collection.AccessControl is a string"),
            (
                Collection.accessControlProperty, .string("devicePasscode,faceID"),
                "org.tpmkeychain.Collection.AccessControl: unknown flag \"faceID\"; use and, biometryAny, biometryCurrentSet, devicePasscode, or, userPresence"
            ),
            (
                Collection.allowedExecutablesProperty, .array(element: "s", [.string("secret-tool")]),
                "org.tpmkeychain.Collection.AllowedExecutables is a non-empty array of absolute paths"
            ),
            (
                Collection.allowedExecutablesProperty, .array(element: "s", []),
                "org.tpmkeychain.Collection.AllowedExecutables is a non-empty array of absolute paths"
            ),
            (
                Collection.confirmEachAccessProperty, .string("yes"),
                "org.tpmkeychain.Collection.ConfirmEachAccess is a boolean"
            ),
        ]
        for (name, value, message) in cases {
            let error = refusal([name: value])
            #expect(error?.name == .invalidArgs, "\(name)")
            #expect(error?.message == message)
        }
    }

    @Test("with several wrong, the label's error comes first, then access control, executables, confirmation")
    func firstErrorInOrder() {
        let wrong: [String: BusValue] = [
            Collection.labelProperty: .uint32(1), Collection.accessControlProperty: .bool(true),
            Collection.allowedExecutablesProperty: .string("/bin/sh"),
            Collection.confirmEachAccessProperty: .string("yes"),
        ]
        var remaining = wrong
        for name in [
            Collection.labelProperty, Collection.accessControlProperty, Collection.allowedExecutablesProperty,
            Collection.confirmEachAccessProperty,
        ] {
            #expect(refusal(remaining)?.message.hasPrefix(name) == true, "\(name)")
            remaining[name] = nil
        }
    }

    @Test("an item's label and attributes; neither given is an empty label and no attributes")
    func itemProperties() throws {
        let item = try NewItemProperties(
            .properties([
                (NewItemProperties.labelProperty, .string("mail")),
                (NewItemProperties.attributesProperty, .stringDictionary(["user": "ada", "server": "imap"])),
            ]))
        #expect(item.label == "mail")
        #expect(item.attributes == ["user": "ada", "server": "imap"])
        let bare = try NewItemProperties(.properties([]))
        #expect(bare.label == "" && bare.attributes.isEmpty)
    }

    @Test("an item's properties with a repeated name, a label not a string, or attributes not a{ss} are refused")
    func itemPropertiesRefused() {
        let repeated = BusValue.array(
            element: "{sv}",
            [
                .dictionaryEntry(.string(NewItemProperties.labelProperty), .variant(.string("a"))),
                .dictionaryEntry(.string(NewItemProperties.labelProperty), .variant(.string("b"))),
            ])
        let cases: [(BusValue, String)] = [
            (repeated, "CreateItem's properties repeat a name"),
            (
                .properties([(NewItemProperties.labelProperty, .bytes([1]))]),
                "org.freedesktop.Secret.Item.Label is a string"
            ),
            (
                .properties([(NewItemProperties.attributesProperty, .array(element: "s", [.string("user")]))]),
                "org.freedesktop.Secret.Item.Attributes is a{ss}"
            ),
        ]
        for (value, message) in cases {
            let error = #expect(throws: SecretServiceError.self) { _ = try NewItemProperties(value) }
            #expect(error?.name == .invalidArgs)
            #expect(error?.message == message)
        }
    }
}
