import CommandLineSupport
import FoundationEssentials
import TPM
import TPMKeychain
import TPMKeychainFprintd
import ToolSupport

#if canImport(Glibc)
import Glibc
#endif

/// One line of `tpm-keychain doctor`: what was checked, how it stands, and what to do.
struct Finding: Encodable, Equatable {
    enum Verdict: String, Encodable {
        /// Works as it should.
        case ok
        /// Works, with a limit the user should know about.
        case warning
        /// Keeps the keychain (or a part of it) from working.
        case problem
        /// Neither good nor bad: how the machine is set up.
        case info
    }

    let check: String
    let verdict: Verdict
    let summary: String
    var remedy: String?
}

/// The checks `tpm-keychain doctor` makes. Each reads and changes nothing: no store is opened
/// (opening may finish an interrupted write), no simulator is started, no TPM command that
/// needs authorization or writes is sent.
struct ReadinessChecks {
    /// The stores to check: every store of the data directory, and the one `--keychain` names.
    let stores: [String]
    let environment: [String: String]

    func run() -> [Finding] {
        var findings = [tpmDevice()]
        findings += tpm()
        findings.append(simulator())
        findings += stores.map(store)
        findings.append(fingerprintReader())
        findings.append(enrollmentHelper())
        findings.append(userBinding())
        findings.append(loginHook())
        findings.append(passkeyTransport())
        return findings
    }

    // MARK: Passkeys

    /// Whether browsers can see the passkey authenticator: they find FIDO devices among HID
    /// devices, which a process creates through the kernel's UHID (`/dev/uhid`). Without it the
    /// authenticator serves its socket only, for clients that can use it.
    func passkeyTransport(uhid: String = "/dev/uhid") -> Finding {
        guard access(uhid, F_OK) == 0 else {
            return Finding(
                check: "passkeys", verdict: .info,
                summary:
                    "\(uhid) is missing (this kernel has no UHID): tpm-keychain-passkeys --uhid cannot make a HID device; its socket works, which browsers do not read",
                remedy:
                    "load the uhid module (modprobe uhid) on a kernel that has it; clients such as python-fido2 use the socket meanwhile"
            )
        }
        guard access(uhid, R_OK | W_OK) == 0 else {
            return Finding(
                check: "passkeys", verdict: .info,
                summary: "\(uhid) is there but this user may not open it: browsers would not see the authenticator",
                remedy: "give your user access to \(uhid) (a udev rule, as for security keys)")
        }
        return Finding(
            check: "passkeys", verdict: .info,
            summary:
                "\(uhid) is usable: tpm-keychain-passkeys --uhid makes a HID security key that browsers find"
        )
    }

    // MARK: The TPM

    private static let resourceManager = "/dev/tpmrm0"

    func tpmDevice() -> Finding {
        if let tcti = TPMConfiguration.environmentTCTI {
            return Finding(
                check: "tpm device", verdict: .info,
                summary:
                    "\(TPMConfiguration.environmentVariable)=\(tcti) chooses the TPM; \(Self.resourceManager) is not used"
            )
        }
        var status = stat()
        guard stat(Self.resourceManager, &status) == 0 else {
            if access("/dev/tpm0", F_OK) == 0 {
                return Finding(
                    check: "tpm device", verdict: .problem,
                    summary: "/dev/tpm0 is there but not the kernel's resource manager \(Self.resourceManager)",
                    remedy:
                        "use Linux 4.12 or later, or run tpm2-abrmd and set \(TPMConfiguration.environmentVariable)=tabrmd"
                )
            }
            return Finding(
                check: "tpm device", verdict: .warning,
                summary:
                    "no hardware TPM (\(Self.resourceManager) is not there): a simulated TPM is used, and nothing is bound to hardware",
                remedy:
                    "enable the TPM (often \"fTPM\", \"PTT\" or \"Security Chip\") in the firmware settings, if the machine has one"
            )
        }
        guard access(Self.resourceManager, R_OK | W_OK) == 0 else {
            let group = getgrgid(status.st_gid).map { String(cString: $0.pointee.gr_name) } ?? "gid \(status.st_gid)"
            return Finding(
                check: "tpm device", verdict: .problem,
                summary: "\(Self.resourceManager) is there, but this user may not use it (group \(group))",
                remedy: "sudo usermod -aG \(group) $USER, then log in again")
        }
        return Finding(check: "tpm device", verdict: .ok, summary: "\(Self.resourceManager): this user may use it")
    }

    /// The TPM a store would use when there is one to reach without starting a simulator: its
    /// identity, dictionary-attack state, owner authorization and NV room.
    func tpm() -> [Finding] {
        let tcti: String
        if let chosen = TPMConfiguration.environmentTCTI {
            tcti = chosen
        } else if TPMConfiguration.hardwareTPMIsUsable {
            tcti = TPMConfiguration.defaultTCTI
        } else {
            return [
                Finding(
                    check: "tpm", verdict: .info,
                    summary:
                        "no TPM to reach without starting a simulator; each store's own simulator is not started here")
            ]
        }
        let facts: (TPMDescription, TPMDictionaryAttackStatus)
        do {
            let connection = try TPMConnection(TPMConfiguration(tcti: tcti))
            defer { connection.close() }
            facts = (try connection.describe(), try connection.dictionaryAttackStatus())
        } catch {
            return [
                Finding(
                    check: "tpm", verdict: .problem, summary: "\(tcti) does not answer: \(error)",
                    remedy: TPMConfiguration.environmentTCTI == nil
                        ? "is another program holding /dev/tpm0? (tpm2-abrmd, a TPM tool)"
                        : "start the TPM \(TPMConfiguration.environmentVariable) names, or unset it")
            ]
        }
        let (description, status) = facts
        let identity = "\(description.manufacturer) \(description.vendor), firmware \(description.firmwareVersion)"
        var findings = [
            description.isSimulator
                ? Finding(
                    check: "tpm", verdict: .warning,
                    summary: "\(tcti) is a simulated TPM (\(identity)): nothing sealed to it is bound to hardware")
                : Finding(check: "tpm", verdict: .ok, summary: "\(tcti): \(identity)")
        ]
        findings.append(Self.lockout(status))
        findings.append(ownerHierarchy(status))
        findings.append(Self.nvRoom(status))
        return findings
    }

    static func lockout(_ status: TPMDictionaryAttackStatus) -> Finding {
        if status.inLockout {
            return Finding(
                check: "lockout", verdict: .problem,
                summary:
                    "the TPM is in dictionary-attack lockout: passcodes, PINs and keys with them are refused (\(status.failedAuthorizations) of \(status.maxAuthorizationFailures) failures)",
                remedy:
                    "wait: one failure is forgotten every \(status.recoveryInterval) s; or tpm-keychain reset-lockout with the lockout authorization"
            )
        }
        if status.recoveryInterval == 0 || status.maxAuthorizationFailures == 0 {
            return Finding(
                check: "lockout", verdict: .warning,
                summary: "dictionary-attack protection is off: a passcode can be guessed without limit",
                remedy: "set it with tpm2_dictionarylockout (needs the lockout authorization)")
        }
        if status.failedAuthorizations > 0 {
            return Finding(
                check: "lockout", verdict: .warning,
                summary:
                    "\(status.failedAuthorizations) of \(status.maxAuthorizationFailures) authorization failures counted; one is forgotten every \(status.recoveryInterval) s"
            )
        }
        return Finding(
            check: "lockout", verdict: .ok,
            summary:
                "no failures counted; lockout after \(status.maxAuthorizationFailures), one forgotten every \(status.recoveryInterval) s"
        )
    }

    func ownerHierarchy(_ status: TPMDictionaryAttackStatus) -> Finding {
        guard status.ownerAuthorizationSet else {
            // Most machines ship so. Then NV_UndefineSpace needs no secret: any user who may open
            // the TPM can delete every keychain's passcode counter, lock state and rollback
            // counter (review 3, N1), which SECURITY.md "Other local users" lists as what stays.
            return Finding(
                check: "owner hierarchy", verdict: .warning,
                summary:
                    "no owner password: storage keys need none, but any user who may open the TPM can delete NV indices, this keychain's passcode counter, lock state and rollback counter among them (passcode-protected items then cannot be opened)",
                remedy:
                    "set one (as root: tpm2_changeauth -c owner) and give it in a file only you can read: \(TPMConfiguration.ownerAuthorizationFileVariable)=/path/to/file; keep a recovery key (add-recovery-key)"
            )
        }
        let given = [TPMConfiguration.ownerAuthorizationVariable, TPMConfiguration.ownerAuthorizationFileVariable]
            .filter { environment[$0].map { !$0.isEmpty } ?? false }
        if let variable = given.first {
            return Finding(
                check: "owner hierarchy", verdict: .ok,
                summary: "the owner hierarchy has a password; \(variable) gives it")
        }
        return Finding(
            check: "owner hierarchy", verdict: .problem,
            summary: "the owner hierarchy has a password, and no storage key or counter can be made without it",
            remedy:
                "give it in a file only you can read: \(TPMConfiguration.ownerAuthorizationFileVariable)=/path/to/file")
    }

    static func nvRoom(_ status: TPMDictionaryAttackStatus) -> Finding {
        let counters = "\(status.nvCounters) NV counters defined"
        if status.nvCountersAvailable == 0 {
            return Finding(
                check: "nv room", verdict: .problem,
                summary: "no room for another NV counter (\(counters)): new stores get no rollback protection",
                remedy: "undefine NV indices nothing uses (tpm2_getcap handles-nv-index lists them)")
        }
        if status.nvCountersAvailable < 4 {
            return Finding(
                check: "nv room", verdict: .warning,
                summary:
                    "room for \(status.nvCountersAvailable) more NV counters (\(counters)); each store and device takes one or more"
            )
        }
        return Finding(
            check: "nv room", verdict: .ok,
            summary: "room for \(status.nvCountersAvailable) more NV counters (\(counters))")
    }

    func simulator() -> Finding {
        let missing = ["swtpm", "swtpm_setup"].filter { Self.executable(named: $0) == nil }
        if missing.isEmpty {
            return Finding(
                check: "swtpm", verdict: .ok,
                summary: "installed: a simulated TPM can be started when no hardware is usable")
        }
        let needed = TPMConfiguration.environmentTCTI == nil && !TPMConfiguration.hardwareTPMIsUsable
        return Finding(
            check: "swtpm", verdict: needed ? .problem : .info,
            summary:
                "\(missing.joined(separator: " and ")) not found on PATH\(needed ? ", and no other TPM is usable" : ": needed only without a hardware TPM")",
            remedy: "sudo apt-get install swtpm swtpm-tools")
    }

    // MARK: Stores

    func store(_ path: String) -> Finding {
        let check = "store \(path)"
        let location: KeychainLocation
        do {
            location = try KeychainLocation(path: path)
            try location.checkStore()
        } catch let error where error.code == .storeNotFound {
            return Finding(check: check, verdict: .info, summary: "no store yet (the first item creates it)")
        } catch {
            return Finding(
                check: check, verdict: .problem, summary: error.message, remedy: Remedy.forKeychainError(error))
        }
        var notes: [String] = []
        var verdict = Finding.Verdict.ok
        var remedy: String?
        if let recorded = location.recordedTPM {
            notes.append("made on \(recorded)")
            if location.recordedTPMIsSimulated == false, TPMConfiguration.environmentTCTI == nil,
                !TPMConfiguration.hardwareTPMIsUsable
            {
                verdict = .problem
                notes.append("which this user cannot reach now")
                remedy = "see the tpm device line"
            }
        }
        if let layout = location.recordedLayout { notes.insert("layout \(layout)", at: 0) }
        if let user = location.recordedBoundUser { notes.append("bound to user ID \(user)") }
        switch counterState(of: location) {
        case .none:
            notes.append("no rollback counter: older copies of its files would not be detected")
            if verdict == .ok { verdict = .warning }
        case .present(let index):
            notes.append("rollback counter 0x\(String(index, radix: 16)) in the TPM")
        case .notChecked(let index):
            notes.append("rollback counter 0x\(String(index, radix: 16)) (not checked: its TPM is not reachable here)")
        case .missing(let index):
            notes.append(
                "its rollback counter 0x\(String(index, radix: 16)) is gone from the TPM: the store will not open")
            verdict = .problem
            remedy =
                "if the TPM was cleared: tpm-keychain recover; otherwise tpm-keychain accept-rollback-risk --confirm \(SecurityFormat.quoted(path)) (docs/SECURITY.md, \"Rollback and deletion\")"
        }
        if location.hasRecoveryKey {
            notes.append("a recovery key exists")
        } else {
            notes.append("no recovery key: if the TPM is cleared or replaced, its items are lost")
            if verdict == .ok { verdict = .warning }
            remedy =
                remedy
                ?? "tpm-keychain add-recovery-key --keychain \(SecurityFormat.quoted(path)), and keep the key off the machine"
        }
        return Finding(check: check, verdict: verdict, summary: notes.joined(separator: "; "), remedy: remedy)
    }

    enum CounterState {
        case none
        case present(UInt32)
        case missing(UInt32)
        case notChecked(UInt32)
    }

    /// Whether the store's rollback counter is defined on the TPM the store uses, when that TPM
    /// can be reached without starting a simulator (a read of the index's public area only).
    func counterState(of location: KeychainLocation) -> CounterState {
        guard let index = location.recordedRollbackCounterIndex else { return .none }
        let tcti: String
        if let chosen = TPMConfiguration.environmentTCTI {
            tcti = chosen
        } else if location.recordedTPMIsSimulated == false, TPMConfiguration.hardwareTPMIsUsable {
            tcti = TPMConfiguration.defaultTCTI
        } else {
            return .notChecked(index)
        }
        do {
            let connection = try TPMConnection(TPMConfiguration(tcti: tcti))
            defer { connection.close() }
            return try connection.nvIndexAttributes(index) == nil ? .missing(index) : .present(index)
        } catch {
            return .notChecked(index)
        }
    }

    // MARK: Authenticators

    func fingerprintReader() -> Finding {
        if environment["TPM_KEYCHAIN_AUTHENTICATOR"] == "none" {
            return Finding(
                check: "fingerprint", verdict: .info,
                summary:
                    "turned off (TPM_KEYCHAIN_AUTHENTICATOR=none): biometry items ask for the passcode where they accept it"
            )
        }
        let authenticator = FprintdAuthenticator(timeout: .seconds(5))
        let outcome: Result<Enrollment?, any Error>
        do {
            outcome = .success(try waitFor { try await authenticator.enrollment() })
        } catch {
            outcome = .failure(error)
        }
        switch outcome {
        case .success(nil):
            return Finding(
                check: "fingerprint", verdict: .warning,
                summary: "fprintd has a reader, but this user has no finger enrolled: biometry items cannot be added",
                remedy: "fprintd-enroll")
        case .success:
            return Finding(check: "fingerprint", verdict: .ok, summary: "fprintd has a reader and this user's fingers")
        case .failure(let error):
            let reason = (error as? AuthenticationError)?.message ?? "\(error)"
            return Finding(
                check: "fingerprint", verdict: .info,
                summary: "no fingerprint authentication: \(reason); items that need biometry cannot be read here")
        }
    }

    func enrollmentHelper() -> Finding {
        let reader = FprintdAuthenticator()
        if reader.enrollmentHelperIsInstalled {
            return Finding(
                check: "enrollment helper", verdict: .ok,
                summary:
                    "installed (\(reader.enrollmentHelperSocket)): a finger enrolled again, even under the same name, invalidates biometryCurrentSet items"
            )
        }
        return Finding(
            check: "enrollment helper", verdict: .warning,
            summary:
                "not installed: the enrollment is known by finger names, so a finger deleted and enrolled again under the same name does not invalidate biometryCurrentSet items",
            remedy: "sudo Scripts/install-enrollment-helper.sh (docs/SECURITY.md, \"The enrollment helper\")")
    }

    /// Whether private stores are bound to their user (the enrollment helper), and what a copy
    /// of one allows when they are not.
    func userBinding() -> Finding {
        let binding = KeychainLocation.userBinding
        if binding.bound {
            return Finding(
                check: "user binding", verdict: .ok,
                summary:
                    "\(binding.reason): your private stores are bound to you as they are created or next opened, so a copy of one opens for no other user"
            )
        }
        return Finding(
            check: "user binding", verdict: .info,
            summary:
                "\(binding.reason): stores are bound to this TPM, not to your user, so a copy of a store's files opens for any other user who may use this TPM, for every item no passcode or biometry protects",
            remedy:
                "sudo Scripts/install-enrollment-helper.sh binds them; meanwhile keep stores private (0700, as they are made) and protect what matters with --access-control devicePasscode (docs/SECURITY.md, \"User binding\")"
        )
    }

    func loginHook() -> Finding {
        let directory = "/etc/pam.d"
        // Each service's uncommented lines, read once for both questions below.
        let serviceLines = ((try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []).sorted().map {
            name in
            let text = (try? String(contentsOfFile: directory + "/" + name, encoding: .utf8)) ?? ""
            let lines = text.split(separator: "\n").filter { !$0.trimmingWhitespace().hasPrefix("#") }
            return (name, lines)
        }
        /// The services of /etc/pam.d with an uncommented line that `matches`.
        func services(where matches: (Substring) -> Bool) -> [String] {
            serviceLines.filter { $0.1.contains(where: matches) }.map(\.0)
        }
        let hooked = services { $0.contains("pam_tpm_keychain.so") }
        // The lines of versions before the module: pam_exec handed the hook every password typed.
        let pamExec = services { $0.contains("pam_exec") && $0.contains("pam-hook") }
        if !pamExec.isEmpty {
            return Finding(
                check: "login", verdict: .warning,
                summary:
                    "\(pamExec.map { directory + "/" + $0 }.joined(separator: ", ")) run tpm-keychain pam-hook through pam_exec, which no longer unlocks (pam_exec hands it every password typed, rejected ones too)",
                remedy:
                    "replace those lines with pam_tpm_keychain.so (Scripts/install-pam-module.sh; README, \"Unlock with your login\")"
            )
        }
        let setting = LoginUnlockMarker.read()
        if hooked.isEmpty {
            return Finding(
                check: "login", verdict: setting == "on" ? .warning : .info,
                summary: "no PAM service runs pam_tpm_keychain.so: logging in does not unlock the keychain"
                    + (setting == "on" ? ", although login-unlock is on for you" : ""),
                remedy: setting == "on"
                    ? "install the module and add its lines (README, \"Unlock with your login\")" : nil)
        }
        let services = hooked.map { directory + "/" + $0 }.joined(separator: ", ")
        switch setting {
        case "on"?:
            return Finding(
                check: "login", verdict: .ok, summary: "PAM runs pam_tpm_keychain.so in \(services); login-unlock is on"
            )
        case let reason?:
            return Finding(
                check: "login", verdict: .warning,
                summary: "PAM runs pam_tpm_keychain.so in \(services), but the hook turned login-unlock off: \(reason)",
                remedy: "make the keychain passcode your login password (change-passcode), then login-unlock on")
        case nil:
            return Finding(
                check: "login", verdict: .info,
                summary:
                    "PAM runs pam_tpm_keychain.so in \(services); login-unlock is off for you (tpm-keychain login-unlock on)"
            )
        }
    }

    static func executable(named name: String) -> String? {
        let path = ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin"
        return path.split(separator: ":").map { "\($0)/\(name)" }.first { access($0, X_OK) == 0 }
    }
}
