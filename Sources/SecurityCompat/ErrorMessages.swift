// swift-format-ignore-file: AlwaysUseLowerCamelCase
// Apple's names, kept as Apple spells them so that ported code compiles unchanged.

/// The message for a result code, as Apple's SecCopyErrorMessageString gives it (the texts of
/// SecBase.h, from which Apple generates SecErrorMessages.strings), else "OSStatus <n>".
public func SecCopyErrorMessageString(_ status: OSStatus, _ reserved: UnsafeMutableRawPointer?) -> CFString? {
    (SecErrorMessages.text[status] ?? "OSStatus \(status)") as NSString
}

enum SecErrorMessages {
    static let text: [OSStatus: String] = [
        errSecSuccess: "No error.",
        errSecUnimplemented: "Function or operation not implemented.",
        errSecDiskFull: "The disk is full.",
        errSecIO: "I/O error.",
        errSecParam: "One or more parameters passed to a function were not valid.",
        errSecWrPerm: "Write permissions error.",
        errSecAllocate: "Failed to allocate memory.",
        errSecUserCanceled: "User canceled the operation.",
        errSecBadReq: "Bad parameter or invalid state for operation.",
        errSecNotAvailable: "No keychain is available. You may need to restart your computer.",
        errSecReadOnly: "This keychain cannot be modified.",
        errSecAuthFailed: "The user name or passphrase you entered is not correct.",
        errSecNoSuchKeychain: "The specified keychain could not be found.",
        errSecDuplicateItem: "The specified item already exists in the keychain.",
        errSecItemNotFound: "The specified item could not be found in the keychain.",
        errSecNoSuchAttr: "The specified attribute does not exist.",
        errSecNoSuchClass: "The specified item does not appear to be a valid keychain item.",
        errSecInteractionNotAllowed: "User interaction is not allowed.",
        errSecDataNotAvailable: "The contents of this item cannot be retrieved.",
        errSecDecode: "Unable to decode the provided data.",
        errSecMissingEntitlement: "A required entitlement isn't present.",
        errSecInvalidEncoding: "The encoding was not valid.",
    ]
}
