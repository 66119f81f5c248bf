import Testing

@testable import SecretService

/// When a collection's `Items` value goes out: at once, then at most once per interval, carrying
/// every change since. Driven by explicit instants, not by the clock.
@Suite("the Items signal schedule")
struct ItemsSignalScheduleTests {
    let start = ContinuousClock.now
    let interval = ItemsSignalSchedule.interval

    /// What the schedule answers to each step, in order: true/false for a change (sent at once or
    /// not), the collections due for a look.
    enum Step {
        case change(String, Duration)
        case due(Duration)
    }

    func run(_ steps: [Step], on schedule: inout ItemsSignalSchedule) -> [String] {
        steps.map { step in
            switch step {
            case .change(let id, let after): schedule.itemsChanged(id, at: start + after) ? "sent" : "waits"
            case .due(let after): schedule.takeDue(at: start + after).sorted().joined(separator: ",")
            }
        }
    }

    @Test("the first change goes out at once; changes within the interval wait for its end, once")
    func batchesWithinTheInterval() {
        var schedule = ItemsSignalSchedule()
        let answers = run(
            [
                .change("login", .zero), .change("login", .milliseconds(10)), .change("login", .milliseconds(20)),
                .due(interval - .milliseconds(1)), .due(interval), .due(interval * 3),
                // Sent at the interval's end: a change within the next interval waits again.
                .change("login", interval + .milliseconds(5)), .due(interval * 2),
                // Long after: at once.
                .change("login", interval * 10),
            ], on: &schedule)
        #expect(answers == ["sent", "waits", "waits", "", "login", "", "waits", "login", "sent"])
        #expect(schedule.nextDue == nil)
    }

    @Test("collections are scheduled apart; a forgotten one sends nothing more")
    func collectionsApartAndForgotten() {
        var schedule = ItemsSignalSchedule()
        let first = run(
            [
                .change("a", .zero), .change("b", .milliseconds(1)), .change("a", .milliseconds(2)),
                .change("b", .milliseconds(3)),
            ], on: &schedule)
        #expect(first == ["sent", "sent", "waits", "waits"])
        #expect(schedule.nextDue == start + interval)
        schedule.forget("b")
        let second = run([.due(interval * 2), .change("b", interval * 2)], on: &schedule)
        #expect(second == ["a", "sent"])
    }
}
