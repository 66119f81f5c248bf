import CommandLineSupport
import FoundationEssentials
import KeychainVocabulary
import ToolSupport

/// A password item as the CLI shows it (``SecurityFormat``'s attribute block, ``ItemJSON``): its
/// class and its attributes as stored, never its secret.
///
/// Attributes are kept as bytes: SecItem code may store Data where the CLI stores text, and each
/// output says how it shows bytes that are not UTF-8.
struct ShownItem {
    let itemClass: ItemClass
    let attributes: AttributeList

    init(_ result: ItemQueryResult) {
        itemClass = result.itemClass
        attributes = result.attributes
    }

    /// `security`'s class code: "genp" or "inet".
    var classCode: String { itemClass.code.description }

    func bytes(_ tag: FourCharacterCode) -> [UInt8]? { attributes[tag] }

    func text(_ tag: FourCharacterCode) -> String? { attributes.string(tag) }

    /// A date attribute (`cdat`, `mdat`): nanoseconds since 1970, as the engine stores them.
    func date(_ tag: FourCharacterCode) -> Date? {
        attributes.nanoseconds(tag).map { Date(timeIntervalSince1970: Double($0) / 1e9) }
    }

    /// kSecAttrPort: 0 when the item has none, as Apple reports "no specific port".
    var port: UInt16 { InternetPasswordAttributes.port(in: attributes) ?? 0 }

    /// Items without an access group: the ones the CLI's find and delete verbs see (an access
    /// group is another program's namespace, such as git-credential-tpm-keychain's).
    var isUngrouped: Bool { attributes[AttributeTag.accessGroup]?.isEmpty ?? true }
}

extension PasswordValue {
    /// The item value, of the kind the `Keychain` API gives a String or Data, so that either API
    /// reads it back.
    var itemValue: ItemValue {
        switch self {
        case .text(let text): ItemValue(kind: .string, bytes: Array(text.utf8))
        case .bytes(let bytes): ItemValue(kind: .data, bytes: Array(bytes))
        }
    }
}
