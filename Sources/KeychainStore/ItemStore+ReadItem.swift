import FoundationEssentials
import KeychainVocabulary

// What the one read path (ItemStore+Reading.swift) is asked for and what it returns.
extension ItemStore {
    /// What the read path decrypts besides the header: only what the caller needs.
    struct ReadParts: OptionSet {
        let rawValue: UInt8
        static let attributes = ReadParts(rawValue: 1 << 0)
        static let secret = ReadParts(rawValue: 1 << 1)
        /// The secret where no key record protects it, else nothing (a result's value).
        static let unprotectedSecret = ReadParts(rawValue: 1 << 2)
    }

    /// An item as the read path returns it: its header's facts and the parts asked for, authenticated.
    struct ReadItem {
        /// The header as decoded: its facts are read from it only when a caller asks (a get of
        /// the secret alone needs no item ID or key record, and each is an allocation).
        private enum Header {
            /// Boxed: format 1 is read only until a store's first write, and its attributes
            /// would otherwise make every format-2 read's result several times larger.
            indirect case formatOne(ItemFileV1.Read)
            case formatTwo(ItemFileV2.Header)
        }
        private let header: Header
        /// Format 2's attributes, when asked for (format 1's are in ``itemAttributes()``).
        var attributes: AttributeList?
        var secret: [UInt8]?
        let path: String

        init(_ header: ItemFileV2.Header, path: String) {
            self.header = .formatTwo(header)
            self.path = path
        }

        init(_ read: ItemFileV1.Read, path: String) {
            header = .formatOne(read)
            secret = read.value?.bytes
            self.path = path
        }

        var itemID: [UInt8] {
            switch header {
            case .formatOne(let read): read.header.itemID
            case .formatTwo(let header): header.itemID
            }
        }
        var generation: UInt64 {
            switch header {
            case .formatOne(let read): read.header.generation
            case .formatTwo(let header): header.generation
            }
        }
        var accessibility: Accessibility {
            switch header {
            case .formatOne(let read): read.header.accessibility
            case .formatTwo(let header): header.accessibility
            }
        }
        var kind: ValueKind {
            switch header {
            case .formatOne(let read): read.header.kind
            case .formatTwo(let header): header.kind
            }
        }
        /// Format 1 has only the master key.
        var keyRecord: [UInt8] {
            switch header {
            case .formatOne: ItemFileV2.masterKeyRecord
            case .formatTwo(let header): header.keyRecord
            }
        }

        /// The attributes as a generic password's, when they were asked for.
        func itemAttributes() throws(KeychainError) -> ItemAttributes {
            if case .formatOne(let read) = header { return read.attributes }
            return try ItemAttributes(attributes ?? AttributeList(), accessibility: accessibility, path: path)
        }
    }
}
