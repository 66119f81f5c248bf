/// How an enrollment identifier carries the weaker identifier it supersedes (docs/FORMAT.md,
/// "Enrollment identifiers"): `"TKES"` ‖ UINT16 n ‖ n bytes of the superseded identifier ‖ the
/// identifier proper.
///
/// An authenticator that learns to identify the enrolled set better (fprintd's finger names, then
/// a keyed hash of the prints themselves once the enrollment helper is installed) would otherwise
/// look like an enrollment change to every device that noted the old identifier, and invalidate
/// every biometryCurrentSet item. A device whose last noted enrollment is the superseded identifier
/// adopts the new one instead, without moving its counter; from then on only the new one counts.
package enum EnrollmentIdentifier {
    static let magic: [UInt8] = Array("TKES".utf8)

    /// `identifier` carrying `superseded` (at most 65,535 bytes of it).
    package static func encode(_ identifier: [UInt8], superseding superseded: [UInt8]) -> [UInt8] {
        let kept = Array(superseded.prefix(Int(UInt16.max)))
        return magic + [UInt8(kept.count >> 8), UInt8(kept.count & 0xFF)] + kept + identifier
    }

    /// The superseded identifier `identifier` carries, if it carries one.
    package static func superseded(in identifier: [UInt8]) -> [UInt8]? {
        let header = magic.count + 2
        guard identifier.count >= header, Array(identifier.prefix(magic.count)) == magic else { return nil }
        let count = Int(identifier[magic.count]) << 8 | Int(identifier[magic.count + 1])
        guard identifier.count >= header + count else { return nil }
        return Array(identifier[header..<(header + count)])
    }
}
