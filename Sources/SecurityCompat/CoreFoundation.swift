// swift-format-ignore-file: AlwaysUseLowerCamelCase
// Apple's names, kept as Apple spells them so that ported code compiles unchanged.

// The Core Foundation surface that iOS keychain code uses and Linux's Foundation lacks, declared
// so that such code type-checks unchanged: the CF types are Foundation's classes (so
// `[String: Any] as CFDictionary`, `"x" as CFString` and `AnyObject?` out-parameters work as on
// Apple's platforms), the constants are implicitly unwrapped as Apple's are.
//
// - Important: do not also `import CoreFoundation`: its CFDictionary would make the name ambiguous.

@_exported import Foundation
import Secrets

public typealias OSStatus = Int32
/// Apple's CFTypeRef: any object.
public typealias CFTypeRef = AnyObject
public typealias CFDictionary = NSDictionary
public typealias CFMutableDictionary = NSMutableDictionary
/// A class, as on Apple's platforms: kSec constants are passed where AnyObject is expected.
public typealias CFString = NSString
public typealias CFBoolean = NSNumber
public typealias CFNumber = NSNumber
public typealias CFData = NSData
public typealias CFArray = NSArray
public typealias CFDate = NSDate
public typealias CFError = NSError
public typealias CFErrorDomain = CFString
public typealias CFOptionFlags = UInt
public typealias CFIndex = Int

/// A memory allocator; there is only the default one.
public final class CFAllocator: Sendable {
    init() {}
}

public let kCFAllocatorDefault: CFAllocator! = nil
public let kCFBooleanTrue: CFBoolean! = NSNumber(value: true)
public let kCFBooleanFalse: CFBoolean! = NSNumber(value: false)
nonisolated(unsafe) public let kCFBundleIdentifierKey: CFString! = "CFBundleIdentifier"

/// No error.
public let noErr: OSStatus = 0

/// A CFString as a dictionary key is its String, as where Apple's constants bridge to String:
/// `result[kSecAttrAccount]` on a `[AnyHashable: Any]` finds the value stored under "acct".
/// Process-wide, as it is on Apple's platforms (Linux's Foundation hashes NSString apart).
// swift-format-ignore: AvoidRetroactiveConformances
// Retroactive on purpose: Apple's Foundation has this conformance and Linux's lacks it.
extension NSString: @retroactive _HasCustomAnyHashableRepresentation {
    public func _toCustomAnyHashable() -> AnyHashable? {
        AnyHashable(self as String)
    }
}

public func CFErrorGetDomain(_ error: CFError!) -> CFErrorDomain! { error.domain as NSString }
public func CFErrorGetCode(_ error: CFError!) -> CFIndex { error.code }
public func CFErrorCopyUserInfo(_ error: CFError!) -> CFDictionary! { error.userInfo as NSDictionary }
public func CFErrorCopyDescription(_ error: CFError!) -> CFString! { error.localizedDescription as NSString }

// MARK: Randomness (SecRandomCopyBytes)

public typealias SecRandomRef = OpaquePointer
nonisolated(unsafe) public let kSecRandomDefault: SecRandomRef? = nil

/// Fills `bytes` with `count` bytes from the kernel's CSPRNG (getrandom).
///
/// - Returns: errSecSuccess.
public func SecRandomCopyBytes(_ rnd: SecRandomRef?, _ count: Int, _ bytes: UnsafeMutableRawPointer) -> Int32 {
    guard count > 0 else { return errSecSuccess }
    let random = SystemRandom.bytes(count)
    random.withUnsafeBytes { bytes.copyMemory(from: $0.baseAddress!, byteCount: count) }
    return errSecSuccess
}
