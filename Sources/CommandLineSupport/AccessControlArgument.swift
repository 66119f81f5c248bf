package import TPMKeychain
import ToolSupport
import WireFormat

/// Parses `--access-control` and `--accessible` into the library's ``AccessControl``.
package enum AccessControlArgument {
    package static let flagNames: [String: AccessControl.Flags] = [
        "userPresence": .userPresence, "biometryAny": .biometryAny, "biometryCurrentSet": .biometryCurrentSet,
        "devicePasscode": .devicePasscode, "or": .or, "and": .and,
    ]
    package static let classNames: [String: Accessibility] = [
        "whenUnlocked": .whenUnlocked, "afterFirstUnlock": .afterFirstUnlock,
        "whenPasscodeSetThisDeviceOnly": .whenPasscodeSetThisDeviceOnly,
        "whenUnlockedThisDeviceOnly": .whenUnlockedThisDeviceOnly,
        "afterFirstUnlockThisDeviceOnly": .afterFirstUnlockThisDeviceOnly,
        "always": .always, "alwaysThisDeviceOnly": .alwaysThisDeviceOnly,
    ]

    package static func parse(flags: String?, accessible: String?) throws -> AccessControl? {
        guard flags != nil || accessible != nil else { return nil }
        var parsed: AccessControl.Flags = []
        for name in (flags ?? "").split(separator: ",").map({ $0.trimmingWhitespace() })
        where !name.isEmpty {
            guard let flag = flagNames[name] else {
                throw CommandFailure(
                    ExitStatus.usage,
                    "unknown access-control flag \"\(name)\" (known: \(flagNames.keys.sorted().joined(separator: ", ")))"
                )
            }
            parsed.insert(flag)
        }
        let className = accessible ?? "whenUnlocked"
        guard let accessibility = classNames[className] else {
            throw CommandFailure(
                ExitStatus.usage,
                "unknown accessibility \"\(className)\" (known: \(classNames.keys.sorted().joined(separator: ", ")))")
        }
        return try AccessControl(accessibility, flags: parsed)
    }
}
