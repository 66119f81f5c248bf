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

    // MARK: Grants

    static let secretTool = "/usr/bin/secret-tool"
    static let toolHash = [UInt8](repeating: 0xA1, count: 32)

    /// A peer of the Secret Service running `executable` (file contents `hash`), started by `ancestors`.
    static func peer(
        _ executable: String = secretTool, hash: [UInt8] = toolHash, ancestors: [String] = ["/usr/bin/bash"],
        session: String = "boot/1", face: AccessCaller.Face = .secretService
    ) -> AccessCaller {
        AccessCaller(
            face: face, source: .peerCredentials, executable: executable,
            facts: CallerFacts(
                executable: executable, executableHash: hash, unit: "app.service", applicationID: nil,
                ancestors: ancestors, loginSession: session))
    }

    static func grant(
        _ effect: Grant.Effect, _ subject: Grant.Subject, item: [UInt8]? = nil, lease: Grant.Lease = .always
    ) -> Grant {
        Grant(id: GrantBook.newID(), effect: effect, subject: subject, item: item, lease: lease, created: 0)
    }

    /// The outcome of `operation` by `caller` on a target with `grants` (and the rules of `target`).
    static func outcome(
        _ operation: AccessOperation, _ caller: AccessCaller, _ grants: [Grant], item: [UInt8]? = nil,
        rules: AccessTarget.Rules = .executables([app]), locked: Bool = false, lockedForReading: Bool = false,
        now: Int64 = 1_000
    ) -> Outcome {
        do throws(AccessRefusal) {
            try AccessDecision.decide(
                operation, by: caller,
                on: AccessTarget(
                    rules: rules, locked: locked, lockedForReading: lockedForReading || locked, grants: grants,
                    item: item, now: now))
            return .allowed
        } catch {
            return .refused(error)
        }
    }

    @Test(
        "an allow grant stands in for the rules and for a confirmation, never for an unlock; a deny wins over every allow; metadata is not governed"
    )
    func grantsDecide() {
        let byHash = Self.grant(.allow, Grant.Subject(executableHash: Self.toolHash))
        let refusedByRules = Outcome.refused(.notAllowed(executable: Self.secretTool))
        for operation in AccessOperation.allCases where operation != .readMetadata {
            #expect(Self.outcome(operation, Self.peer(), []) == refusedByRules, "\(operation)")
            #expect(Self.outcome(operation, Self.peer(), [byHash]) == .allowed, "\(operation)")
            let deny = Self.grant(.deny, Grant.Subject(ancestor: "/usr/bin/bash"))
            #expect(Self.outcome(operation, Self.peer(), [byHash, deny]) == .refused(.denied(by: deny)))
            // Even a program the rules name, in a collection open to every program.
            #expect(
                Self.outcome(operation, Self.peer(Self.app), [deny], rules: .anyProgram) == .refused(.denied(by: deny)))
        }
        // A grant is the person's remembered answer: a confirm-each-access read needs no new one.
        #expect(Self.outcome(.readSecret, Self.peer(), [byHash], lockedForReading: true) == .allowed)
        // It does not unlock.
        #expect(Self.outcome(.readSecret, Self.peer(), [byHash], locked: true) == .refused(.locked(forReading: true)))
        #expect(Self.outcome(.write, Self.peer(), [byHash], locked: true) == .refused(.locked(forReading: false)))
        let deny = Self.grant(.deny, Grant.Subject(executable: Self.secretTool))
        #expect(Self.outcome(.readMetadata, Self.peer(), [deny]) == .allowed)
    }

    @Test(
        "a grant names a program by every fact it gives: a copy elsewhere matches a hash, not a path and hash; a changed file matches neither"
    )
    func grantSubjects() {
        let pathAndHash = Self.grant(.allow, Grant.Subject(executable: Self.secretTool, executableHash: Self.toolHash))
        let hashOnly = Self.grant(.allow, Grant.Subject(executableHash: Self.toolHash))
        let copy = Self.peer("/tmp/copy/secret-tool")
        let changed = Self.peer(hash: [UInt8](repeating: 0xB2, count: 32))
        #expect(Self.outcome(.readSecret, Self.peer(), [pathAndHash]) == .allowed)
        #expect(Self.outcome(.readSecret, copy, [pathAndHash]) == .refused(.notAllowed(executable: copy.executable)))
        #expect(Self.outcome(.readSecret, copy, [hashOnly]) == .allowed)
        for grant in [pathAndHash, hashOnly] {
            #expect(Self.outcome(.readSecret, changed, [grant]) == .refused(.notAllowed(executable: Self.secretTool)))
        }
        // Unit, app ID and ancestor: each must match; an unknown fact matches nothing.
        let unit = Self.grant(.allow, Grant.Subject(unit: "app.service"))
        let app = Self.grant(.allow, Grant.Subject(applicationID: "org.example.App"))
        let underNode = Self.grant(.allow, Grant.Subject(ancestor: "/usr/bin/node"))
        #expect(Self.outcome(.readSecret, Self.peer(), [unit]) == .allowed)
        #expect(Self.outcome(.readSecret, Self.peer(), [app]) != .allowed)
        #expect(Self.outcome(.readSecret, Self.peer(), [underNode]) != .allowed)
        #expect(
            Self.outcome(.readSecret, Self.peer(ancestors: ["/usr/bin/node", "/usr/bin/bash"]), [underNode]) == .allowed
        )
        // A grant that names nobody matches nobody.
        #expect(Self.outcome(.readSecret, Self.peer(), [Self.grant(.allow, Grant.Subject())]) != .allowed)
    }

    @Test("an item's grant covers that item only; leases end at their time, in another login session, and once used")
    func grantScopesAndLeases() throws {
        let item = [UInt8](repeating: 7, count: 20)
        let forItem = Self.grant(.allow, Grant.Subject(executableHash: Self.toolHash), item: item)
        #expect(Self.outcome(.readSecret, Self.peer(), [forItem], item: item) == .allowed)
        #expect(Self.outcome(.readSecret, Self.peer(), [forItem], item: [UInt8](repeating: 8, count: 20)) != .allowed)
        #expect(Self.outcome(.readSecret, Self.peer(), [forItem]) != .allowed, "a search is not the item")
        let untilThen = Self.grant(.allow, Grant.Subject(executableHash: Self.toolHash), lease: .until(2_000))
        #expect(Self.outcome(.readSecret, Self.peer(), [untilThen], now: 1_999) == .allowed)
        #expect(Self.outcome(.readSecret, Self.peer(), [untilThen], now: 2_000) != .allowed)
        let session = Self.grant(.allow, Grant.Subject(executableHash: Self.toolHash), lease: .loginSession("boot/1"))
        #expect(Self.outcome(.readSecret, Self.peer(session: "boot/1"), [session]) == .allowed)
        #expect(Self.outcome(.readSecret, Self.peer(session: "boot/2"), [session]) != .allowed)
        // The decision hands back the grant that decided, a lasting one before one for one use.
        let once = Self.grant(.allow, Grant.Subject(executableHash: Self.toolHash), lease: .once)
        let lasting = Self.grant(.allow, Grant.Subject(unit: "app.service"))
        let target = AccessTarget(rules: .executables([Self.app]), grants: [once, lasting], now: 1_000)
        #expect(try AccessDecision.decide(.readSecret, by: Self.peer(), on: target) == lasting)
        let onlyOnce = AccessTarget(rules: .executables([Self.app]), grants: [once], now: 1_000)
        #expect(try AccessDecision.decide(.readSecret, by: Self.peer(), on: onlyOnce) == once)
    }

    @Test(
        "grants name the peers of the faces that serve other programs only; a peer whose facts are unknown is refused where a deny could name it"
    )
    func grantsNameServedPeers() {
        let deny = Self.grant(.deny, Grant.Subject(executable: Self.secretTool))
        // The tools and libraries run as the user with the store's keys: a grant does not bind them.
        for face in AccessCaller.Face.allCases where !face.isNamedByGrants {
            #expect(Self.outcome(.readSecret, Self.peer(face: face), [deny], rules: .anyProgram) == .allowed, "\(face)")
        }
        let unknown = AccessCaller(face: .sshAgent, source: .peerCredentials, executable: nil, facts: nil)
        #expect(Self.outcome(.readSecret, unknown, [deny], rules: .anyProgram) == .refused(.denied(by: deny)))
        let allow = Self.grant(.allow, Grant.Subject(executable: Self.secretTool))
        #expect(Self.outcome(.readSecret, unknown, [allow], rules: .anyProgram) == .allowed)
        #expect(Self.outcome(.readSecret, unknown, [allow]) == .refused(.notAllowed(executable: nil)))
    }

    @Test(
        "no face sees, reads, writes or deletes the grants' group, the audit trail's, the portal key's or the passkey PIN's"
    )
    func reservedGroupsAreNobodys() {
        #expect(
            AccessDecision.reservedGroups == [
                GrantBook.accessGroup, AuditTrail.accessGroup, "tpm-keychain.portal", "tpm-keychain.passkeys",
            ])
        for group in AccessDecision.reservedGroups {
            for face in AccessCaller.Face.allCases {
                let caller = AccessCaller(face: face)
                #expect(!AccessDecision.sees(group, caller), "\(face)")
                for operation in AccessOperation.allCases {
                    #expect(throws: AccessRefusal.notEntitled(group: group)) {
                        try AccessDecision.decide(operation, by: caller, on: AccessTarget(accessGroup: group))
                    }
                }
            }
        }
    }
}
