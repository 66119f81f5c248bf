extension Collection<UInt8> {
    /// Lower-case hexadecimal: the one hex encoder of every target (names on disk, digests in
    /// messages, fixtures). Table-driven, since file names are computed on the get path.
    /// Inlinable so that each caller gets it specialized: the generic body, called across
    /// modules, looks up conformances at run time (about 0.1 ms the first time in a process).
    @inlinable
    package var hexString: String {
        let digits: [UInt8] = Array("0123456789abcdef".utf8)
        var text: [UInt8] = []
        text.reserveCapacity(count * 2)
        for byte in self {
            text.append(digits[Int(byte >> 4)])
            text.append(digits[Int(byte & 0x0F)])
        }
        return String(decoding: text, as: UTF8.self)
    }
}

extension Array where Element == UInt8 {
    /// Parses lower- or upper-case hexadecimal; nil for odd lengths or other characters.
    package init?(hexString: String) {
        let characters = Array(hexString.utf8)
        guard characters.count.isMultiple(of: 2) else { return nil }
        var result: [UInt8] = []
        result.reserveCapacity(characters.count / 2)
        var index = 0
        while index < characters.count {
            guard let high = Self.nibble(characters[index]), let low = Self.nibble(characters[index + 1]) else {
                return nil
            }
            result.append(high << 4 | low)
            index += 2
        }
        self = result
    }

    private static func nibble(_ character: UInt8) -> UInt8? {
        switch character {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): character - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): character - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): character - UInt8(ascii: "A") + 10
        default: nil
        }
    }
}

extension BinaryInteger {
    /// Lower-case hexadecimal, zero-padded on the left to at least `width` digits (`0x01a00000`
    /// handles, `08` device numbers): the one fixed-width hex printer of every target.
    package func hexString(width: Int) -> String {
        let digits = String(self, radix: 16)
        return String(repeating: "0", count: max(0, width - digits.count)) + digits
    }
}
