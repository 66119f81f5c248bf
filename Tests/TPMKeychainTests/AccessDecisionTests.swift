import Testing

@testable import TPMKeychain

/// The one decision point: every operation against every kind of refusal, from a table that must
/// have a row for each operation (a new one fails here until its row says what it needs).
@Suite("the access decision")
struct AccessDecisionTests {
    enum Outcome: Equatable {
        case allowed
        case refused(AccessRefusal)
    }

    enum Scenario: CaseIterable {
        /// Another user than the keychain's owner, even one the rules would allow.
        case notOwner
        /// A SecItem caller not entitled to the item's group.
        case notEntitled
        /// A program the collection's rules do not name.
        case notAllowed
        /// A collection whose rules could not be read.
        case rulesUnknown
        /// A locked collection (or store).
        case locked
        /// A confirm-each-access collection this caller has no confirmation for.
        case unconfirmed
        /// Everything in order.
        case inOrder
    }

    static let app = "/usr/bin/allowed-app"

    static func inputs(_ scenario: Scenario) -> (AccessCaller, AccessTarget) {
        let entitled = AccessCaller(face: .secItem, accessGroups: ["com.example.app"])
        let program = AccessCaller(face: .secretService, executable: "/usr/bin/other-app")
        let allowed = AccessCaller(face: .secretService, executable: app)
        let rules = AccessTarget.Rules.executables([app])
        switch scenario {
        case .notOwner:
            let stranger = AccessCaller(face: .secretService, uid: 4242, source: .peerCredentials, executable: app)
            return (stranger, AccessTarget(owner: 1000, rules: rules))
        case .notEntitled: return (entitled, AccessTarget(accessGroup: "com.bank.app"))
        case .notAllowed: return (program, AccessTarget(rules: rules))
        case .rulesUnknown: return (allowed, AccessTarget(rules: .unknown))
        case .locked: return (allowed, AccessTarget(rules: rules, locked: true))
        case .unconfirmed: return (allowed, AccessTarget(rules: rules, locked: false, lockedForReading: true))
        case .inOrder: return (allowed, AccessTarget(rules: rules))
        }
    }

    static let notAllowed = Outcome.refused(.notAllowed(executable: "/usr/bin/other-app"))
    static let rulesUnknown = Outcome.refused(.notAllowed(executable: app))
    static let notEntitled = Outcome.refused(.notEntitled(group: "com.bank.app"))
    static let notOwner = Outcome.refused(.notOwner(uid: 4242, owner: 1000))

    /// What each operation meets in each scenario.
    static let table: [AccessOperation: [Scenario: Outcome]] = [
        .readMetadata: [
            .notOwner: notOwner, .notEntitled: notEntitled, .notAllowed: .allowed, .rulesUnknown: .allowed,
            .locked: .allowed,
            .unconfirmed: .allowed, .inOrder: .allowed,
        ],
        .readSecret: [
            .notOwner: notOwner, .notEntitled: notEntitled, .notAllowed: notAllowed, .rulesUnknown: rulesUnknown,
            .locked: .refused(.locked(forReading: true)), .unconfirmed: .refused(.locked(forReading: true)),
            .inOrder: .allowed,
        ],
        .write: [
            .notOwner: notOwner, .notEntitled: notEntitled, .notAllowed: notAllowed, .rulesUnknown: rulesUnknown,
            .locked: .refused(.locked(forReading: false)), .unconfirmed: .allowed, .inOrder: .allowed,
        ],
        .delete: [
            .notOwner: notOwner, .notEntitled: notEntitled, .notAllowed: notAllowed, .rulesUnknown: rulesUnknown,
            .locked: .refused(.locked(forReading: false)), .unconfirmed: .allowed, .inOrder: .allowed,
        ],
        .repoint: [
            .notOwner: notOwner, .notEntitled: notEntitled, .notAllowed: notAllowed, .rulesUnknown: rulesUnknown,
            .locked: .refused(.locked(forReading: false)), .unconfirmed: .allowed, .inOrder: .allowed,
        ],
        .lock: [
            .notOwner: notOwner, .notEntitled: notEntitled, .notAllowed: notAllowed, .rulesUnknown: rulesUnknown,
            .locked: .allowed,
            .unconfirmed: .allowed, .inOrder: .allowed,
        ],
        .unlock: [
            .notOwner: notOwner, .notEntitled: notEntitled, .notAllowed: notAllowed, .rulesUnknown: rulesUnknown,
            .locked: .allowed,
            .unconfirmed: .allowed, .inOrder: .allowed,
        ],
    ]

    @Test("the table has a row for every operation, with every scenario")
    func everyOperationHasARow() {
        #expect(Set(Self.table.keys) == Set(AccessOperation.allCases))
        for (operation, row) in Self.table {
            #expect(Set(row.keys) == Set(Scenario.allCases), "\(operation)")
        }
    }

    @Test("each operation meets what its row says, in every scenario", arguments: AccessOperation.allCases)
    func decides(_ operation: AccessOperation) throws {
        let row = try #require(Self.table[operation])
        for scenario in Scenario.allCases {
            let (caller, target) = Self.inputs(scenario)
            let outcome: Outcome
            do throws(AccessRefusal) {
                try AccessDecision.decide(operation, by: caller, on: target)
                outcome = .allowed
            } catch {
                outcome = .refused(error)
            }
            #expect(outcome == row[scenario], "\(operation) in \(scenario)")
        }
    }

    @Test(
        "a query naming no group shows an entitled caller its groups only (SecItem is entitled to items of none); the owner's tools see all"
    )
    func visibility() {
        let secItem = AccessCaller(face: .secItem, accessGroups: ["com.example.app", ""])
        #expect(AccessDecision.sees("com.example.app", secItem))
        #expect(AccessDecision.sees("", secItem))
        #expect(!AccessDecision.sees("", AccessCaller(face: .cli, accessGroups: ["com.example.app"])))
        #expect(!AccessDecision.sees("com.bank.app", secItem))
        for face in AccessCaller.Face.allCases where face != .secItem {
            #expect(AccessDecision.sees("com.bank.app", AccessCaller(face: face)), "\(face)")
        }
        // Items of no group are an entitlement like any other: an import limited to named groups
        // writes none of them.
        #expect(throws: AccessRefusal.notEntitled(group: "")) {
            try AccessDecision.decide(
                .write, by: AccessCaller(face: .cli, accessGroups: ["com.example.app"]),
                on: AccessTarget(accessGroup: ""))
        }
    }
}
