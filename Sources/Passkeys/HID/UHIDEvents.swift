/// The kernel's UHID events (linux/uhid.h): how a process becomes a HID device that browsers and
/// libfido2 find as a FIDO security key. Each event is one `struct uhid_event`, packed, in the
/// host's byte order: a 32-bit type, then its union, whose largest member is create2 (4,372
/// bytes) and which is 4,376 bytes: `struct uhid_start_req`'s 64-bit field, not packed, aligns
/// the union to 8. Written and read as whole events on /dev/uhid; UHIDTests compiles the
/// kernel's header to check these sizes and offsets.
package enum UHIDEvents {
    /// sizeof(struct uhid_event).
    package static let size = 4 + (128 + 64 + 64 + 2 + 2 + 4 * 4 + descriptorLimit + 7) / 8 * 8
    /// HID_MAX_DESCRIPTOR_SIZE and UHID_DATA_MAX.
    static let descriptorLimit = 4096
    static let dataLimit = 4096

    package enum EventType: UInt32 {
        case destroy = 1
        case start = 2
        case stop = 3
        case open = 4
        case close = 5
        case output = 6
        case getReport = 9
        case getReportReply = 10
        case create2 = 11
        case input2 = 12
        case setReport = 13
        case setReportReply = 14
    }

    /// A FIDO authenticator's HID report descriptor (FIDO CTAP 2.1 §11.2.8.1): usage page 0xF1D0,
    /// usage 1, one 64-byte input report and one 64-byte output report, unnumbered.
    package static let fidoReportDescriptor: [UInt8] = [
        0x06, 0xD0, 0xF1, 0x09, 0x01, 0xA1, 0x01, // usage page FIDO, usage CTAPHID, collection
        0x09, 0x20, 0x15, 0x00, 0x26, 0xFF, 0x00, 0x75, 0x08, 0x95, 0x40, 0x81, 0x02, // input, 64 bytes
        0x09, 0x21, 0x15, 0x00, 0x26, 0xFF, 0x00, 0x75, 0x08, 0x95, 0x40, 0x91, 0x02, // output, 64 bytes
        0xC0, // end collection
    ]

    /// What the kernel sends the device.
    package enum Event: Equatable {
        /// A report the host wrote (an output report): 64 bytes of CTAPHID.
        case output([UInt8])
        /// A feature report asked for: answered with an error, as a FIDO device has none.
        case getReport(id: UInt32)
        case setReport(id: UInt32)
        case start, stop, open, close
        case other(UInt32)
    }

    /// UHID_CREATE2: a USB-like HID device named `name` with the FIDO report descriptor.
    package static func create(name: String, vendor: UInt32, product: UInt32) -> [UInt8] {
        var event = [UInt8](repeating: 0, count: size)
        put(EventType.create2.rawValue, at: 0, in: &event)
        let offset = 4
        for (index, byte) in name.utf8.prefix(127).enumerated() { event[offset + index] = byte }
        let sizes = offset + 128 + 64 + 64
        put16(UInt16(fidoReportDescriptor.count), at: sizes, in: &event)
        put16(0x03, at: sizes + 2, in: &event) // BUS_USB
        put(vendor, at: sizes + 4, in: &event)
        put(product, at: sizes + 8, in: &event)
        put(0, at: sizes + 12, in: &event) // version
        put(0, at: sizes + 16, in: &event) // country
        event.replaceSubrange(sizes + 20..<sizes + 20 + fidoReportDescriptor.count, with: fidoReportDescriptor)
        return event
    }

    /// UHID_INPUT2: `report` sent to the host as an input report.
    package static func input(_ report: [UInt8]) -> [UInt8] {
        var event = [UInt8](repeating: 0, count: size)
        put(EventType.input2.rawValue, at: 0, in: &event)
        put16(UInt16(report.count), at: 4, in: &event)
        event.replaceSubrange(6..<6 + report.count, with: report)
        return event
    }

    /// UHID_GET_REPORT_REPLY or UHID_SET_REPORT_REPLY refusing the report (EIO).
    package static func refusal(_ type: EventType, id: UInt32) -> [UInt8] {
        var event = [UInt8](repeating: 0, count: size)
        put(type.rawValue, at: 0, in: &event)
        put(id, at: 4, in: &event)
        put16(5, at: 8, in: &event) // EIO
        return event
    }

    /// An event the kernel wrote; nil for one too short to be an event.
    package static func parse(_ bytes: [UInt8]) -> Event? {
        guard bytes.count >= 4 else { return nil }
        let type = value(at: 0, in: bytes)
        switch EventType(rawValue: type) {
        case .output:
            // struct uhid_output_req: data[4096], size (16 bits), rtype.
            guard bytes.count >= 4 + dataLimit + 3 else { return nil }
            let length = Int(value16(at: 4 + dataLimit, in: bytes))
            guard length <= dataLimit else { return nil }
            var data = Array(bytes[4..<4 + length])
            // An unnumbered output report comes with the report number 0 in front.
            if data.count == CTAPHIDChannels.reportSize + 1, data.first == 0 { data.removeFirst() }
            return .output(data)
        case .getReport:
            guard bytes.count >= 8 else { return nil }
            return .getReport(id: value(at: 4, in: bytes))
        case .setReport:
            guard bytes.count >= 8 else { return nil }
            return .setReport(id: value(at: 4, in: bytes))
        case .start: return .start
        case .stop: return .stop
        case .open: return .open
        case .close: return .close
        default: return .other(type)
        }
    }

    private static func put(_ value: UInt32, at offset: Int, in event: inout [UInt8]) {
        withUnsafeBytes(of: value) { event.replaceSubrange(offset..<offset + 4, with: $0) }
    }

    private static func put16(_ value: UInt16, at offset: Int, in event: inout [UInt8]) {
        withUnsafeBytes(of: value) { event.replaceSubrange(offset..<offset + 2, with: $0) }
    }

    private static func value(at offset: Int, in bytes: [UInt8]) -> UInt32 {
        bytes[offset..<offset + 4].withUnsafeBytes { $0.loadUnaligned(as: UInt32.self) }
    }

    private static func value16(at offset: Int, in bytes: [UInt8]) -> UInt16 {
        bytes[offset..<offset + 2].withUnsafeBytes { $0.loadUnaligned(as: UInt16.self) }
    }
}
