// tpm-keychain-stress: writes to a keychain store from its own process, acknowledging each durable
// write on stdout, until it has written --count values or is killed.
//
//     tpm-keychain-stress --keychain DIR --tcti TCTI --service S --accounts a,b,c --count N --size BYTES --start K
//
// The crash-safety and multi-process tests run it and kill -9 it mid-write; it is also a quick
// way to hammer a store by hand. Each value is "<account>:<sequence>:" padded to --size bytes,
// so a reader can tell exactly which write it holds. Output: "ready" once the store is open,
// then "wrote <account> <sequence>" after each write returns. With --delete-every N, every Nth
// write is followed by a delete of the same account ("deleted <account> <sequence>" once it returns).
import Foundation
import KeychainStorageCompat
import SystemCalls
import TPMKeychain

func emit(_ line: String) {
    FileHandle.standardOutput.write(Data((line + "\n").utf8))
}

func argument(_ name: String) -> String? {
    guard let index = CommandLine.arguments.firstIndex(of: name), index + 1 < CommandLine.arguments.count else {
        return nil
    }
    return CommandLine.arguments[index + 1]
}

// --progress: every progress event of a whole-store operation (rotation, format upgrade, cipher
// change) on stdout, as "progress rewrote 12" or "progress committed". --pause-at EVENT ("rewrote
// 12", "committed"): at that event, says "paused EVENT" and waits to be killed, so that a crash
// test kills at a point it chose on either side of the commit, whatever the machine's speed.
// "replacing NAME" is reported before each atomic file replace's rename (a write half done).
// --pause-count N: pause at the Nth such event instead of the first.
let reportsProgress = CommandLine.arguments.contains("--progress")
let pauseAt = argument("--pause-at")
let pauseCount = Int(argument("--pause-count") ?? "") ?? 1
if reportsProgress || pauseAt != nil {
    let seen = Locked(0)
    OperationProgress.observe { event in
        if reportsProgress { emit("progress \(event)") }
        if event.description == pauseAt,
            seen.withLock({
                $0 += 1
                return $0
            }) == pauseCount
        {
            emit("paused \(event)")
            while true { pause() }
        }
    }
}

// --storage-root R --store NAME --change-cipher OLD NEW: opens a KeychainStorage with the cipher of
// password OLD and changes it to NEW (light scrypt parameters: the crash tests run it often).
if let root = argument("--storage-root"), let name = argument("--store"),
    let index = CommandLine.arguments.firstIndex(of: "--change-cipher"),
    index + 2 < CommandLine.arguments.count
{
    let light = Cipher.Parameters(rounds: 1 << 10, blockSize: 8, parallelism: 1)
    do {
        KeychainStorage.rootDirectory = root
        let old = try Cipher(password: CommandLine.arguments[index + 1], salt: Data("salt".utf8), parameters: light)
        let new = try Cipher(password: CommandLine.arguments[index + 2], salt: Data("salt".utf8), parameters: light)
        let storage = try KeychainStorage.openStore(name: name, cipher: old)
        emit("ready")
        try storage.changeCipher(to: new)
        emit("done")
        exit(0)
    } catch {
        FileHandle.standardError.write(Data("tpm-keychain-stress: \(error)\n".utf8))
        exit(1)
    }
}

// --storage-root R --store NAME --create: creates a KeychainStorage store (no cipher), with the
// TPM choice of this process's environment (TPM_KEYCHAIN_ALLOW_SIMULATED).
if let root = argument("--storage-root"), let name = argument("--store"), CommandLine.arguments.contains("--create") {
    do {
        KeychainStorage.rootDirectory = root
        _ = try KeychainStorage.createStore(name: name)
        emit("created")
        exit(0)
    } catch {
        FileHandle.standardError.write(Data("tpm-keychain-stress: \(error)\n".utf8))
        exit(1)
    }
}

// --keychain DIR --tcti TCTI --rotate-keys: opens the store and rotates its master key (the key
// rotation crash tests kill it part-way).
if let path = argument("--keychain"), CommandLine.arguments.contains("--rotate-keys") {
    do {
        let location = try KeychainLocation(path: path, tcti: argument("--tcti"))
        _ = try Keychain(service: "stress", location: location).contains("open") // one TPM unseal
        emit("ready")
        let rotation = try await location.rotateKeys()
        emit("done \(rotation.items)")
        exit(0)
    } catch {
        FileHandle.standardError.write(Data("tpm-keychain-stress: \(error)\n".utf8))
        exit(1)
    }
}

guard let path = argument("--keychain"), let service = argument("--service") else {
    FileHandle.standardError.write(
        Data(
            "usage: tpm-keychain-stress --keychain DIR [--tcti TCTI] --service S [--accounts a,b] [--count N | --until PATH] [--size BYTES]\n"
                .utf8))
    exit(64)
}
let accounts = (argument("--accounts") ?? "item").split(separator: ",").map(String.init)
let count = Int(argument("--count") ?? "") ?? Int.max
let size = Int(argument("--size") ?? "") ?? 64
let start = Int(argument("--start") ?? "") ?? 0
let deleteEvery = Int(argument("--delete-every") ?? "") ?? 0
// --until PATH: stop (after the write in progress) once PATH exists, and say how many were written.
let stopFile = argument("--until")

do {
    let keychain = try Keychain(service: service, location: KeychainLocation(path: path, tcti: argument("--tcti")))
    _ = try keychain.contains(accounts[0]) // opens the store: one TPM unseal
    emit("ready")
    var sequence = start
    while sequence - start < count {
        if let stopFile, FileManager.default.fileExists(atPath: stopFile) { break }
        let account = accounts[(sequence - start) % accounts.count]
        var value = Array("\(account):\(sequence):".utf8)
        if value.count < size { value += [UInt8](repeating: UInt8(ascii: "."), count: size - value.count) }
        try keychain.set(Data(value), forKey: account)
        emit("wrote \(account) \(sequence)")
        if deleteEvery > 0 && sequence % deleteEvery == 0 {
            _ = try keychain.remove(account)
            emit("deleted \(account) \(sequence)")
        }
        sequence += 1
    }
    if stopFile != nil { emit("stopped after \(sequence - start)") }
} catch {
    FileHandle.standardError.write(Data("tpm-keychain-stress: \(error)\n".utf8))
    exit(1)
}
