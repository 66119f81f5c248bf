// swift-format-ignore-file: AlwaysUseLowerCamelCase
// Apple's names, kept as Apple spells them so that ported code compiles unchanged.

public import TPMKeychain

/// SecAccessControlCreateFlags, with Apple's raw values.
public struct SecAccessControlCreateFlags: OptionSet, Sendable, Hashable {
    public let rawValue: CFOptionFlags
    public init(rawValue: CFOptionFlags) { self.rawValue = rawValue }

    public static let userPresence = SecAccessControlCreateFlags(rawValue: 1 << 0)
    public static let biometryAny = SecAccessControlCreateFlags(rawValue: 1 << 1)
    public static let touchIDAny = biometryAny
    public static let biometryCurrentSet = SecAccessControlCreateFlags(rawValue: 1 << 3)
    public static let touchIDCurrentSet = biometryCurrentSet
    public static let devicePasscode = SecAccessControlCreateFlags(rawValue: 1 << 4)
    public static let watch = SecAccessControlCreateFlags(rawValue: 1 << 5)
    public static let companion = watch
    public static let or = SecAccessControlCreateFlags(rawValue: 1 << 14)
    public static let and = SecAccessControlCreateFlags(rawValue: 1 << 15)
    public static let privateKeyUsage = SecAccessControlCreateFlags(rawValue: 1 << 30)
    public static let applicationPassword = SecAccessControlCreateFlags(rawValue: 1 << 31)
}

/// An access control made by ``SecAccessControlCreateWithFlags(_:_:_:_:)``: an accessibility
/// class and constraints, enforced by the TPM (TPMKeychain's ``AccessControl``). Hashable, since
/// code keeps it in `[String: AnyHashable]` queries.
public final class SecAccessControl: Hashable, @unchecked Sendable {
    /// What TPMKeychain enforces.
    public let accessControl: AccessControl

    init(_ accessControl: AccessControl) {
        self.accessControl = accessControl
    }

    public static func == (lhs: SecAccessControl, rhs: SecAccessControl) -> Bool {
        lhs.accessControl == rhs.accessControl
    }
    public func hash(into hasher: inout Hasher) { hasher.combine(accessControl) }
}

/// As Apple's: validates the combination, and returns nil with an error (errSecParam in the
/// NSOSStatusErrorDomain) for what Apple refuses and for what has no equivalent here.
public func SecAccessControlCreateWithFlags(
    _ allocator: CFAllocator?, _ protection: CFTypeRef, _ flags: SecAccessControlCreateFlags,
    _ error: UnsafeMutablePointer<Unmanaged<CFError>?>?
) -> SecAccessControl? {
    func fail(_ message: String) -> SecAccessControl? {
        let nsError = NSError(
            domain: NSOSStatusErrorDomain, code: Int(errSecParam), userInfo: [NSLocalizedDescriptionKey: message])
        error?.pointee = Unmanaged.passRetained(nsError)
        return nil
    }
    guard let code = (protection as? String) ?? (protection as? NSString).map({ $0 as String }),
        let accessibility = SecItemAccessibility.accessibility(code: code)
    else {
        return fail("The protection is not a kSecAttrAccessible value")
    }
    do {
        return SecAccessControl(try AccessControl(accessibility, flags: AccessControl.Flags(rawValue: flags.rawValue)))
    } catch {
        return fail(error.message)
    }
}

/// kSecAttrAccessible codes and TPMKeychain's classes.
enum SecItemAccessibility {
    static let codes: [(String, Accessibility)] = [
        ("ak", .whenUnlocked), ("ck", .afterFirstUnlock), ("dk", .always), ("aku", .whenUnlockedThisDeviceOnly),
        ("cku", .afterFirstUnlockThisDeviceOnly), ("dku", .alwaysThisDeviceOnly),
        ("akpu", .whenPasscodeSetThisDeviceOnly),
    ]

    static func accessibility(code: String) -> Accessibility? {
        codes.first { $0.0 == code }?.1
    }

    static func code(_ accessibility: Accessibility) -> String {
        codes.first { $0.1 == accessibility }?.0 ?? "ak"
    }
}
