/// When each collection's `Items` value next goes out in PropertiesChanged.
///
/// libsecret keeps a collection's `Items` in its proxy's property cache, reads it at every
/// ItemCreated and ItemDeleted, and loads items from it: a property named as invalidated leaves it
/// without one, and the client crashes (SIGSEGV in Seahorse, GNOME Online Accounts), while a
/// signal without the value leaves watchers with the old list. So the value is sent. But it grows
/// with the collection, and sent at every write it would make a fill quadratic (10,000 paths at
/// each of 10,000 writes). A collection's value therefore goes out at once when none went out in
/// the last ``interval``, and otherwise once at that interval's end, carrying every change since.
struct ItemsSignalSchedule {
    /// At most one `Items` value per collection per interval: short enough that a watching client
    /// sees another app's item at once in ordinary use, long enough that a bulk fill sends a
    /// handful of lists a second.
    static let interval: Duration = .milliseconds(250)

    private var lastSent: [String: ContinuousClock.Instant] = [:]
    private var due: [String: ContinuousClock.Instant] = [:]

    /// The items of the collection `id` changed at `now`: true when its value is to be sent now
    /// (and is counted as sent), false when it waits for ``takeDue(at:)``.
    mutating func itemsChanged(_ id: String, at now: ContinuousClock.Instant) -> Bool {
        guard due[id] == nil else { return false }
        if let last = lastSent[id], now < last + Self.interval {
            due[id] = last + Self.interval
            return false
        }
        lastSent[id] = now
        return true
    }

    /// The collections whose value is due by `now`, counted as sent.
    mutating func takeDue(at now: ContinuousClock.Instant) -> [String] {
        // Called after every message the daemon answers: nothing to build when nothing waits.
        guard !due.isEmpty else { return [] }
        let ready = due.filter { $0.value <= now }.map(\.key)
        for id in ready {
            due[id] = nil
            lastSent[id] = now
        }
        return ready
    }

    /// When the next waiting value is due; nil when none waits.
    var nextDue: ContinuousClock.Instant? { due.values.min() }

    /// The collection is gone: nothing more is sent for it.
    mutating func forget(_ id: String) {
        due[id] = nil
        lastSent[id] = nil
    }
}
