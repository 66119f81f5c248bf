/// A collection's items in memory, with every attribute value indexed, so that SearchItems by any
/// subset of attributes costs the smallest matching posting list, not a scan of the collection.
/// Built when the collection is first used (one listing of the store, no secret decrypted) and
/// kept current by every write the daemon makes.
struct ItemIndex {
    private(set) var items: [String: SecretItem] = [:]
    /// attribute name → value → item IDs.
    private var postings: [String: [String: Set<String>]] = [:]

    init(_ items: [SecretItem] = []) {
        for item in items { insert(item) }
    }

    subscript(id: String) -> SecretItem? { items[id] }

    /// Adds the item, or replaces the one with its ID.
    mutating func insert(_ item: SecretItem) {
        remove(item.id)
        items[item.id] = item
        for (name, value) in item.attributes { postings[name, default: [:]][value, default: []].insert(item.id) }
    }

    mutating func remove(_ id: String) {
        guard let old = items.removeValue(forKey: id) else { return }
        for (name, value) in old.attributes {
            postings[name]?[value]?.remove(id)
            if postings[name]?[value]?.isEmpty == true { postings[name]?[value] = nil }
            if postings[name]?.isEmpty == true { postings[name] = nil }
        }
    }

    /// The items that have every attribute of `query` with its value (an empty query matches all),
    /// oldest first, then by ID.
    func search(_ query: [String: String]) -> [SecretItem] {
        var candidates: Set<String>? = nil
        // Smallest posting list first: the intersection never grows.
        let lists = query.map { postings[$0.key]?[$0.value] ?? [] }.sorted { $0.count < $1.count }
        for list in lists {
            if let current = candidates {
                candidates = current.intersection(list)
            } else {
                candidates = list
            }
            if candidates?.isEmpty == true { break }
        }
        let found = candidates.map { $0.compactMap { items[$0] } } ?? Array(items.values)
        return found.sorted { ($0.created, $0.id) < ($1.created, $1.id) }
    }

    /// The items whose attributes are exactly `attributes` (what CreateItem's replace replaces).
    func exactly(_ attributes: [String: String]) -> [SecretItem] {
        search(attributes).filter { $0.attributes == attributes }
    }
}
