import DBus
import Foundation
import SystemCalls
import TPMKeychain

// org.freedesktop.Secret.Prompt: unlocking a collection whose access control asks for a person.
// Unlock returns a prompt; Prompt() runs the authentication (the configured authenticator, the
// passcode command) on a task, and the loop emits Completed when it ends. Only the connection
// that asked may run or dismiss it, and a prompt dies with that connection.

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
}

extension SecretServiceProvider {
    func promptMethod(_ call: BusMethodCall, path: String) throws(SecretServiceError) -> [BusValue] {
        guard call.interface.isEmpty || call.interface == Introspection.promptInterface else {
            throw Self.unknownMethod(call)
        }
        guard let prompt = prompts[path], prompt.owner == call.sender else {
            throw SecretServiceError(.noSuchObject, "No prompt \(path) of this connection")
        }
        switch call.member {
        case "Prompt":
            try Self.expect(call, "s")
            guard prompt.task == nil else { return [] }
            prompt.task = startAuthentication(for: prompt, windowID: call.arguments[0].string ?? "")
            return []
        case "Dismiss":
            try Self.expect(call, "")
            prompt.task?.cancel()
            finish(prompt, unlockedPaths: nil)
            return []
        default:
            throw Self.unknownMethod(call)
        }
    }

    /// The most characters of a label or path a question shows.
    static let shownLength = 120

    /// A prompt that unlocks `collections` for `caller`; its path.
    func newUnlockPrompt(for collections: [SecretCollection], paths: [String], caller: String) -> String {
        let prompt = PendingPrompt(
            path: newObjectPath(ObjectPaths.promptPrefix), owner: caller, collectionIDs: collections.map(\.id),
            requestedPaths: paths)
        prompts[prompt.path] = prompt
        return prompt.path
    }

    /// The connection left: its prompts end without a Completed signal (no one to hear it), and
    /// an authentication still running is cancelled; nothing was unlocked by them.
    func forgetPrompts(of uniqueName: String) {
        for (path, prompt) in prompts where prompt.owner == uniqueName {
            prompt.task?.cancel()
            prompts[path] = nil
        }
    }

    /// Outcomes the prompts' tasks posted, applied on the loop thread.
    func applyPromptOutcomes() {
        for outcome in promptOutcomes.withLock({ (outcomes) -> [PromptOutcome] in
            defer { outcomes.removeAll() }
            return outcomes
        }) {
            guard let prompt = prompts[outcome.path] else {
                // Dismissed, or its caller left: what it opened is dropped here.
                audit?.record(
                    event: "unlock prompt ended after its caller left: nothing unlocked", collection: outcome.label)
                continue
            }
            guard let unlocked = outcome.unlocked else {
                audit?.record(event: "unlock prompt failed: \(outcome.message)", collection: outcome.label)
                finish(prompt, unlockedPaths: nil)
                continue
            }
            for (id, keys) in unlocked {
                guard let collection = collections[id] else { continue }
                collection.completeUnlock(keys)
                emitCollectionChanged(collection)
            }
            confirmations[prompt.owner, default: []].formUnion(outcome.confirmed)
            finish(prompt, unlockedPaths: prompt.requestedPaths)
        }
    }

    /// Emits Completed (dismissed when `unlockedPaths` is nil) and forgets the prompt.
    private func finish(_ prompt: PendingPrompt, unlockedPaths: [String]?) {
        prompts[prompt.path] = nil
        emit(
            prompt.path, Introspection.promptInterface, "Completed",
            [.bool(unlockedPaths == nil), .variant(.objectPaths(unlockedPaths ?? []))])
    }

    /// Authenticates on a task (the loop keeps serving meanwhile) and posts the outcome.
    private func startAuthentication(for prompt: PendingPrompt, windowID: String) -> Task<Void, Never> {
        var requests: [String: SecretCollection.UnlockRequest] = [:]
        var failure: String?
        for id in prompt.collectionIDs {
            do {
                if let request = try collections[id]?.unlockRequest() { requests[id] = request }
            } catch {
                failure = error.message
            }
        }
        // Confirm-each-access collections this caller holds no confirmation for: asked by label.
        var toConfirm: [(id: String, label: String)] = []
        for id in prompt.collectionIDs {
            guard let collection = collections[id], collection.confirmsEachAccess,
                confirmations[prompt.owner]?.contains(id) != true
            else { continue }
            toConfirm.append((id, collection.label))
        }
        if !toConfirm.isEmpty && confirm == nil {
            failure = "The collection confirms each access, and the daemon has no --confirm-command"
        }
        // Labels and executable paths are the callers' choice: quoted and escaped before a person
        // reads them (--confirm-command), so none can add a line or reword the question.
        let who =
            peers[prompt.owner].map {
                "\($0.executable.map { DisplayText.quoted($0, limit: Self.shownLength) } ?? "an unknown program") (pid \($0.pid))"
            } ?? "a program"
        let confirm = confirm
        let authenticator = authenticator
        let passcode = passcode
        let path = prompt.path
        let labels = (requests.values.map(\.label) + toConfirm.map(\.label)).sorted().joined(separator: ", ")
        let outcomes = promptOutcomes
        let wakeup = wakeup
        let shownLength = Self.shownLength
        return Task {
            var unlocked: [String: SecretCollection.UnlockedKeys]? = failure == nil ? [:] : nil
            var message = failure ?? ""
            for (id, request) in requests where unlocked != nil {
                let context = AuthenticationContext(
                    authenticator: authenticator, passcode: passcode, location: request.service.location)
                context.localizedReason = "Unlock the keyring \(DisplayText.quoted(request.label, limit: shownLength))"
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
            for (id, label) in toConfirm where unlocked != nil {
                if let confirm,
                    await confirm(
                        "Allow \(who) to read a secret of the keyring \(DisplayText.quoted(label, limit: shownLength))?"
                    ),
                    !Task.isCancelled
                {
                    confirmed.append(id)
                } else {
                    unlocked = nil
                    message = "The person did not allow the read"
                }
            }
            outcomes.withLock {
                $0.append(
                    PromptOutcome(
                        path: path, unlocked: unlocked, confirmed: unlocked == nil ? [] : confirmed, message: message,
                        label: labels))
            }
            wakeup.signal()
        }
    }
}
