import ArgumentParser
import CommandLineSupport
import KeychainVocabulary
import ToolSupport

/// The attributes that name an internet password, with `security`'s flags: what
/// `add-internet-password` stores and what `find-` and `delete-internet-password` match (each
/// optional there: one not given matches anything).
struct InternetPasswordOptions: ParsableArguments {
    @Option(name: [.customShort("a"), .customLong("account")], help: "Account name (kSecAttrAccount).")
    var account: String?

    @Option(name: [.customShort("s"), .customLong("server")], help: "Server name (kSecAttrServer), without a port.")
    var server: String?

    @Option(
        name: [.customShort("r"), .customLong("protocol")],
        help: ArgumentHelp(
            "Protocol, as a four-character code (kSecAttrProtocol): \"htps\" for https, \"http\", \"ftp \" (with its space), \"imps\", \"ssh \", ...",
            valueName: "code"))
    var protocolCode: String?

    @Option(
        name: [.customShort("P"), .customLong("port")], help: "Port number (kSecAttrPort); 0 is none, and matches any.")
    var port: UInt16?

    @Option(name: [.customShort("p"), .customLong("path")], parsing: .unconditional, help: "Path (kSecAttrPath).")
    var path: String?

    @Option(
        name: [.customShort("t"), .customLong("authentication-type")],
        help: ArgumentHelp(
            "Authentication type, as a four-character code (kSecAttrAuthenticationType): \"dflt\", \"http\" (basic), \"httd\" (digest), \"form\", \"ntlm\", ...",
            valueName: "code"))
    var authenticationType: String?

    @Option(
        name: [.customShort("d"), .customLong("security-domain")], parsing: .unconditional,
        help: "Security domain (kSecAttrSecurityDomain), such as an HTTP realm.")
    var securityDomain: String?

    /// Whether any attribute was given: a delete must name something.
    var namesAnything: Bool {
        account != nil || server != nil || protocolCode != nil || (port ?? 0) != 0 || path != nil
            || authenticationType != nil || securityDomain != nil
    }

    /// The attributes given, as the engine stores them. `port` 0 and empty texts for protocol,
    /// path and security domain count as not given (an absent primary-key attribute is an empty
    /// one); `defaults` fills in what an added item always has: port 0 and, as `security`
    /// stores, authentication type "dflt".
    ///
    /// - Throws: ``CommandFailure`` (usage) for a code that is not four printable ASCII characters.
    func attributes(defaults: Bool) throws(CommandFailure) -> AttributeList {
        var list = AttributeList()
        list.setString(server, for: AttributeTag.server)
        list.setString(account, for: AttributeTag.account)
        list.setString(path.flatMap { $0.isEmpty ? nil : $0 }, for: AttributeTag.path)
        list.setString(securityDomain.flatMap { $0.isEmpty ? nil : $0 }, for: AttributeTag.securityDomain)
        if let protocolCode, !protocolCode.isEmpty {
            list[AttributeTag.protocol] = try Self.code(protocolCode, flag: "-r", what: "protocol")
        }
        if let authenticationType, !authenticationType.isEmpty {
            list[AttributeTag.authenticationType] = try Self.code(
                authenticationType, flag: "-t", what: "authentication type")
        } else if defaults {
            list[AttributeTag.authenticationType] = Array("dflt".utf8)
        }
        if defaults {
            list[AttributeTag.port] = InternetPasswordAttributes.port(port ?? 0)
        } else if let port, port != 0 {
            list[AttributeTag.port] = InternetPasswordAttributes.port(port)
        }
        return list
    }

    private static func code(_ text: String, flag: String, what: String) throws(CommandFailure) -> [UInt8] {
        if let bytes = InternetPasswordAttributes.fourCharacterCode(text) { return bytes }
        var message = "the \(what) (\(flag)) must be exactly four characters, Apple's code such as \"htps\" or \"ftp \""
        if let known = InternetPasswordAttributes.protocolCodes[text.lowercased()], flag == "-r" {
            message += "; for \(text) it is \"\(known)\""
        } else if text.utf8.count == 3 {
            message += "; try \"\(text) \""
        }
        throw CommandFailure(ExitStatus.usage, message)
    }
}
