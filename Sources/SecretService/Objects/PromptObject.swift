import DBus
import FoundationEssentials
import SystemCalls
import TPMKeychain
import WireFormat

/// A prompt the daemon handed out and has not completed.
final class PendingPrompt {
    let path: String
    let owner: String
    /// The collections it unlocks, by ID, and the object paths the caller asked to unlock.
    let collectionIDs: [String]
    let requestedPaths: [String]
    var task: Task<Void, Never>?

    init(path: String, owner: String, collectionIDs: [String], requestedPaths: [String]) {
        self.path = path
        self.owner = owner
        self.collectionIDs = collectionIDs
        self.requestedPaths = requestedPaths
    }
}

/// What a prompt's task hands back to the loop.
struct PromptOutcome: Sendable {
    let path: String
    /// By collection ID; nil when the person cancelled or authentication failed.
    let unlocked: [String: SecretCollection.UnlockedKeys]?
    /// Confirm-each-access collections (by ID) whose next read the person allowed.
    let confirmed: [String]
    let message: String
    /// The labels of the collections it was for, for the audit log.
    let label: String
    /// Of those, the ones the person allowed the program from now on, with how long: each becomes
    /// a grant of the collection, for the program as the kernel named it when it asked.
    var remembered: [String: Grant.Lease] = [:]
    /// The program the prompt was for, as a grant names it (its path and its file's hash); nil
    /// when the kernel did not say.
    var program: Grant.Subject? = nil
    /// What the caller said its search was for, kept with a remembered answer's grant.
    var purpose: String? = nil
}

/// org.freedesktop.Secret.Prompt at `…/prompt/<n>`: unlocking a collection whose access control
/// asks for a person. The service's Unlock opens one; Prompt() runs the authentication (the
/// configured authenticator, the passcode command, the confirm command) on a task, so that the
/// loop keeps serving meanwhile, and the loop applies its outcome and emits Completed when it ends.
/// Only the connection that asked may run, dismiss or see it, and a prompt dies with that
/// connection (``SecretServiceRegistry/forget(_:)``).
struct PromptObject: SecretServiceObject {
    let registry: SecretServiceRegistry
    let path: String

    /// The most characters of a label or path a question shows.
    static let shownLength = 120

    private func owned(by sender: String) throws(SecretServiceError) -> PendingPrompt {
        guard let prompt = registry.prompts[path], prompt.owner == sender else {
            throw SecretServiceError(.noSuchObject, "No prompt \(path) of this connection")
        }
        return prompt
    }

    func call(_ call: BusMethodCall, from peer: BusPeer) throws(SecretServiceError) -> [BusValue] {
        guard call.isFor(Introspection.promptInterface) else { throw call.unknownMethod }
        let prompt = try owned(by: call.sender)
        switch call.member {
        case "Prompt":
            try call.requireSignature("s")
            guard prompt.task == nil else { return [] }
            prompt.task = startAuthentication(for: prompt, windowID: call.arguments[0].string ?? "")
            return []
        case "Dismiss":
            try call.requireSignature("")
            prompt.task?.cancel()
            finish(prompt, unlockedPaths: nil)
            return []
        default:
            throw call.unknownMethod
        }
    }

    func properties(of interface: String, for peer: BusPeer) throws(SecretServiceError) -> [(String, BusValue)] {
        // The specification gives prompts no properties; another connection's is no object at all.
        _ = try owned(by: peer.sender)
        return []
    }

    func introspect() -> String {
        Introspection.document(interfaces: [Introspection.promptInterface], children: [])
    }

    /// A prompt that unlocks `collections` for `caller`; its path.
    static func open(
        unlocking collections: [SecretCollection], paths: [String], for caller: String,
        in registry: SecretServiceRegistry
    ) -> String {
        let prompt = PendingPrompt(
            path: registry.newObjectPath(ObjectPaths.promptPrefix), owner: caller,
            collectionIDs: collections.map(\.id), requestedPaths: paths)
        registry.prompts[prompt.path] = prompt
        return prompt.path
    }

    /// What the prompt's task posted: the collections it opened are unlocked, the reads the
    /// person allowed are granted to the caller, and Completed goes out.
    func apply(_ outcome: PromptOutcome) {
        guard let prompt = registry.prompts[path] else {
            // Dismissed, or its caller left: what it opened is dropped here.
            registry.audit?.record(
                event: "unlock prompt ended after its caller left: nothing unlocked", collection: outcome.label)
            return
        }
        guard let unlocked = outcome.unlocked else {
            registry.audit?.record(event: "unlock prompt failed: \(outcome.message)", collection: outcome.label)
            finish(prompt, unlockedPaths: nil)
            return
        }
        for (id, keys) in unlocked {
            guard let collection = registry.collections[id] else { continue }
            collection.completeUnlock(keys)
            registry.emitCollectionChanged(collection)
        }
        registry.confirmations[prompt.owner, default: []].formUnion(outcome.confirmed)
        if let program = outcome.program {
            for (id, lease) in outcome.remembered {
                guard let collection = registry.collections[id] else { continue }
                let grant = Grant(
                    id: GrantBook.newID(), effect: .allow, subject: program, lease: lease, purpose: outcome.purpose,
                    created: GrantBook.now())
                do {
                    try collection.addGrant(grant)
                    registry.audit?.record(
                        event: "the person allowed \(program.description) from now on: grant \(grant.id)",
                        collection: collection.label)
                } catch {
                    registry.audit?.record(
                        event: "a remembered answer could not be kept: \(error.message)", collection: collection.label)
                }
            }
        }
        finish(prompt, unlockedPaths: prompt.requestedPaths)
    }

    /// Emits Completed (dismissed when `unlockedPaths` is nil) and forgets the prompt.
    private func finish(_ prompt: PendingPrompt, unlockedPaths: [String]?) {
        registry.prompts[prompt.path] = nil
        registry.emit(
            prompt.path, Introspection.promptInterface, "Completed",
            [.bool(unlockedPaths == nil), .variant(.objectPaths(unlockedPaths ?? []))])
    }

    /// Authenticates on a task (the loop keeps serving meanwhile) and posts the outcome.
    private func startAuthentication(for prompt: PendingPrompt, windowID: String) -> Task<Void, Never> {
        var requests: [String: SecretCollection.UnlockRequest] = [:]
        var failure: String?
        for id in prompt.collectionIDs {
            do {
                if let request = try registry.collections[id]?.unlockRequest() { requests[id] = request }
            } catch {
                failure = error.message
            }
        }
        // Confirm-each-access collections this caller holds no confirmation for: asked by label,
        // naming the items the Unlock named; a yes covers those (or, for an Unlock of the
        // collection itself, the next read of any of its items), for this connection.
        var toConfirm: [(id: String, label: String, items: [String], keys: [String])] = []
        for id in prompt.collectionIDs {
            guard let collection = registry.collections[id], collection.confirmsEachAccess,
                registry.confirmations[prompt.owner]?.contains(id) != true
            else { continue }
            var items: [String] = []
            var keys: [String] = []
            for path in prompt.requestedPaths {
                guard let (target, item) = try? registry.resolve(path), target === collection else { continue }
                if let item {
                    items.append(item.label)
                    keys.append(SecretServiceRegistry.confirmationKey(collection, item))
                } else {
                    keys.append(collection.id)
                }
            }
            if keys.contains(collection.id) || keys.isEmpty { (items, keys) = ([], [collection.id]) }
            toConfirm.append((id, collection.label, items, keys))
        }
        if !toConfirm.isEmpty && registry.confirm == nil {
            failure = "The collection confirms each access, and the daemon has no --confirm-command"
        }
        // Labels and executable paths are the callers' choice: quoted and escaped before a person
        // reads them (--confirm-command), so none can add a line or reword the question.
        // With what the kernel says of it: the chain that started it, its unit, app id and hash.
        let asking = registry.peers[prompt.owner]
        let askingIdentity = asking?.identity
        // What a remembered answer grants: the program's file as it is now, at its path.
        let program = askingIdentity.flatMap { identity -> Grant.Subject? in
            guard let executable = identity.process.executable, let hash = identity.executableHash else { return nil }
            return Grant.Subject(executable: executable, executableHash: hash)
        }
        let session = askingIdentity?.loginSession
        let purpose = registry.purposes[prompt.owner]
        let who =
            asking.map { peer in
                let identity = askingIdentity
                let program =
                    peer.executable.map { DisplayText.quoted($0, limit: Self.shownLength) } ?? "an unknown program"
                return "\(program) (\(identity?.details ?? "pid \(peer.pid)"))"
            } ?? "a program"
        let confirm = registry.confirm
        let authenticator = registry.authenticator
        let passcode = registry.passcode
        let path = prompt.path
        let labels = (requests.values.map(\.label) + toConfirm.map(\.label)).sorted().joined(separator: ", ")
        let outcomes = registry.promptOutcomes
        let wakeup = registry.wakeup
        let shownLength = Self.shownLength
        return Task {
            var unlocked: [String: SecretCollection.UnlockedKeys]? = failure == nil ? [:] : nil
            var message = failure ?? ""
            for (id, request) in requests where unlocked != nil {
                let context = AuthenticationContext(
                    authenticator: authenticator, passcode: passcode, location: request.service.location)
                context.localizedReason =
                    "Unlock the keyring \(DisplayText.quoted(request.label, limit: shownLength)) for \(who)"
                do throws(KeychainError) {
                    var keys: [[UInt8]: ItemService.OpenedKey] = [:]
                    for record in request.records {
                        if let key = try await request.service.openKey(for: record, context: context) {
                            keys[record.keyRecord] = key
                        }
                    }
                    let enrollment = try await ItemService.enrollment(
                        binding: request.control, authenticator: authenticator)
                    unlocked?[id] = SecretCollection.UnlockedKeys(keys: keys, enrollment: enrollment)
                } catch {
                    unlocked = nil
                    message = error.message
                }
                if Task.isCancelled { unlocked = nil }
            }
            var confirmed: [String] = []
            var remembered: [String: Grant.Lease] = [:]
            for (id, label, items, keys) in toConfirm where unlocked != nil {
                let what =
                    items.isEmpty
                    ? "a secret"
                    : items.prefix(5).map { DisplayText.quoted($0, limit: shownLength) }.joined(separator: ", ")
                        + (items.count > 5 ? " and \(items.count - 5) more" : "")
                let why = purpose.map { " for " + DisplayText.quoted($0, limit: shownLength) } ?? ""
                let answer =
                    await confirm?(
                        "Allow \(who) to read \(what) of the keyring \(DisplayText.quoted(label, limit: shownLength))\(why)?"
                    ) ?? .refused
                if answer.allows, !Task.isCancelled {
                    confirmed += keys
                    switch answer {
                    case .remembered: remembered[id] = .always
                    case .forTheSession: if let session { remembered[id] = .loginSession(session) }
                    case .once, .refused: break
                    }
                } else {
                    unlocked = nil
                    message = "The person did not allow the read"
                }
            }
            outcomes.withLock {
                $0.append(
                    PromptOutcome(
                        path: path, unlocked: unlocked, confirmed: unlocked == nil ? [] : confirmed, message: message,
                        label: labels, remembered: unlocked == nil ? [:] : remembered, program: program,
                        purpose: purpose))
            }
            wakeup.signal()
        }
    }
}
