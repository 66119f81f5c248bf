import CTSS2
import Crypto
import Foundation
import Testing

@testable import TPM

/// The crypto callbacks given to tpm2-tss 4.x's ESAPI (CESAPICryptoContext's
/// ESAPICryptoCallbacks.c), called directly as ESAPI calls them: this machine's tpm2-tss 3.2.1
/// cannot take them, so these are what CI checks of them. Each result is compared with
/// swift-crypto or a published test vector.
@Suite struct ESAPICryptoCallbacksTests {
    /// The table in tpm2-tss 4.x's ESYS_CRYPTO_CALLBACKS order.
    struct Callbacks {
        typealias Context = UnsafeMutablePointer<OpaquePointer?>
        typealias Start = @convention(c) (Context?, UInt16, UnsafeMutableRawPointer?) -> UInt32
        typealias Update =
            @convention(c) (OpaquePointer?, UnsafePointer<UInt8>?, Int, UnsafeMutableRawPointer?) -> UInt32
        typealias Finish =
            @convention(c) (
                Context?, UnsafeMutablePointer<UInt8>?, UnsafeMutablePointer<Int>?, UnsafeMutableRawPointer?
            ) -> UInt32
        typealias Abort = @convention(c) (Context?, UnsafeMutableRawPointer?) -> Void
        typealias MACStart =
            @convention(c) (Context?, UInt16, UnsafePointer<UInt8>?, Int, UnsafeMutableRawPointer?) -> UInt32
        typealias Random = @convention(c) (UnsafeMutablePointer<TPM2B_NONCE>?, Int, UnsafeMutableRawPointer?) -> UInt32
        typealias ECDH =
            @convention(c) (
                UnsafeMutablePointer<TPM2B_PUBLIC>?, Int, UnsafeMutablePointer<TPM2B_ECC_PARAMETER>?,
                UnsafeMutablePointer<TPMS_ECC_POINT>?, UnsafeMutablePointer<UInt8>?, UnsafeMutablePointer<Int>?,
                UnsafeMutableRawPointer?
            ) -> UInt32
        typealias AES =
            @convention(c) (
                UnsafeMutablePointer<UInt8>?, UInt16, UInt16, UInt16, UnsafeMutablePointer<UInt8>?, Int,
                UnsafeMutablePointer<UInt8>?, UnsafeMutableRawPointer?
            ) -> UInt32
        typealias RSA =
            @convention(c) (
                UnsafeMutablePointer<TPM2B_PUBLIC>?, Int, UnsafeMutablePointer<UInt8>?, Int,
                UnsafeMutablePointer<UInt8>?,
                UnsafeMutablePointer<Int>?, UnsafePointer<CChar>?, UnsafeMutableRawPointer?
            ) -> UInt32

        let table: UnsafeRawPointer

        init() throws {
            table = try #require(ESAPICryptoContext.callbackTable)
        }

        func entry<T>(_ index: Int, as type: T.Type) -> T {
            unsafeBitCast(
                table.load(fromByteOffset: index * MemoryLayout<UnsafeRawPointer>.size, as: UnsafeRawPointer.self),
                to: type)
        }

        func rawEntry(_ index: Int) -> UnsafeRawPointer? {
            table.load(fromByteOffset: index * MemoryLayout<UnsafeRawPointer>.size, as: UnsafeRawPointer?.self)
        }

        var rsaEncrypt: RSA { entry(0, as: RSA.self) }
        var hashStart: Start { entry(1, as: Start.self) }
        var hashUpdate: Update { entry(2, as: Update.self) }
        var hashFinish: Finish { entry(3, as: Finish.self) }
        var hashAbort: Abort { entry(4, as: Abort.self) }
        var hmacStart: MACStart { entry(5, as: MACStart.self) }
        var hmacUpdate: Update { entry(6, as: Update.self) }
        var hmacFinish: Finish { entry(7, as: Finish.self) }
        var hmacAbort: Abort { entry(8, as: Abort.self) }
        var random: Random { entry(9, as: Random.self) }
        var ecdh: ECDH { entry(10, as: ECDH.self) }
        var aesEncrypt: AES { entry(11, as: AES.self) }
        var aesDecrypt: AES { entry(12, as: AES.self) }

        /// Runs start/update/finish as ESAPI does; the digest, or the first failing code.
        func digest(
            _ algorithm: UInt16, key: [UInt8]? = nil, _ data: [UInt8], capacity: Int = 64
        ) -> Result<[UInt8], Failure> {
            var context: OpaquePointer?
            let started =
                key.map { key in
                    key.withUnsafeBufferPointer { hmacStart(&context, algorithm, $0.baseAddress, key.count, nil) }
                }
                ?? hashStart(&context, algorithm, nil)
            guard started == 0 else { return .failure(Failure(code: started)) }
            let updated = data.withUnsafeBufferPointer {
                (key == nil ? hashUpdate : hmacUpdate)(context, $0.baseAddress, data.count, nil)
            }
            var output = [UInt8](repeating: 0, count: capacity)
            var size = capacity
            let finished =
                updated != 0 ? updated : (key == nil ? hashFinish : hmacFinish)(&context, &output, &size, nil)
            // As ESAPI does after a failure: an abort, which must cope with a context already freed.
            if finished != 0 { (key == nil ? hashAbort : hmacAbort)(&context, nil) }
            guard finished == 0 else { return .failure(Failure(code: finished)) }
            return .success(Array(output.prefix(size)))
        }
    }

    struct Failure: Error, Equatable { let code: UInt32 }

    // TSS2_ESYS_RC_BAD_SIZE, _NOT_IMPLEMENTED, _BAD_VALUE (tss2_common.h; macros Swift does not import).
    static let badSize: UInt32 = 0x0007_0010
    static let notImplemented: UInt32 = 0x0007_0002
    static let badValue: UInt32 = 0x0007_000B

    @Test(
        "the table has the thirteen callbacks ESAPI requires, and NULL for SM4, init and userdata (4.0's and 4.1's layouts alike)"
    )
    func tableLayout() throws {
        let callbacks = try Callbacks()
        for index in 0..<13 { #expect(callbacks.rawEntry(index) != nil, "entry \(index)") }
        for index in 13..<17 { #expect(callbacks.rawEntry(index) == nil, "entry \(index)") }
    }

    @Test(
        "hashes and HMACs equal swift-crypto's, empty keys included; a too small buffer is BAD_SIZE; unknown algorithms are NOT_IMPLEMENTED"
    )
    func hashesAndHMACs() throws {
        let callbacks = try Callbacks()
        let data = Array("TPMKeychain hands ESAPI its hashes".utf8)
        #expect(try callbacks.digest(0x000B, data).get() == Array(SHA256.hash(data: data)))
        #expect(try callbacks.digest(0x000C, data).get() == Array(SHA384.hash(data: data)))
        #expect(try callbacks.digest(0x000D, data).get() == Array(SHA512.hash(data: data)))
        #expect(try callbacks.digest(0x0004, []).get() == Array(Insecure.SHA1.hash(data: [UInt8]())))
        for key in [[UInt8](), Array(repeating: 0x5A, count: 32), Array(repeating: 0xA5, count: 200)] {
            #expect(
                try callbacks.digest(0x000B, key: key, data).get()
                    == Array(HMAC<SHA256>.authenticationCode(for: data, using: SymmetricKey(data: key))),
                "key of \(key.count) bytes")
        }
        #expect(
            try callbacks.digest(0x000C, key: [1, 2, 3], data).get()
                == Array(HMAC<SHA384>.authenticationCode(for: data, using: SymmetricKey(data: [1, 2, 3]))))
        #expect(callbacks.digest(0x000B, data, capacity: 31) == .failure(Failure(code: Self.badSize)))
        #expect(callbacks.digest(0x000B, key: [1], data, capacity: 31) == .failure(Failure(code: Self.badSize)))
        #expect(callbacks.digest(0x0010, data) == .failure(Failure(code: Self.notImplemented)))
        // ESAPI aborts with the other kind's abort on two error paths: either frees either.
        var context: OpaquePointer?
        #expect(callbacks.hmacStart(&context, 0x000B, [1, 2], 2, nil) == 0 && context != nil)
        callbacks.hashAbort(&context, nil)
        #expect(context == nil)
        #expect(callbacks.hashStart(&context, 0x000B, nil) == 0)
        callbacks.hmacAbort(&context, nil)
        callbacks.hmacAbort(&context, nil)
        #expect(context == nil)
    }

    @Test("AES-CFB matches NIST SP 800-38A F.3.13 and F.3.17, in place, for any length, and decrypts back")
    func aesCFB() throws {
        let callbacks = try Callbacks()
        func run(_ function: Callbacks.AES, key: [UInt8], iv: [UInt8], _ data: [UInt8]) -> (UInt32, [UInt8]) {
            var (key, iv, buffer) = (key, iv, data)
            let rc = function(&key, 0x0006, UInt16(key.count * 8), 0x0043, &buffer, buffer.count, &iv, nil)
            return (rc, buffer)
        }
        let iv = bytes("000102030405060708090a0b0c0d0e0f")
        let plaintext = bytes("6bc1bee22e409f96e93d7e117393172aae2d8a571e03ac9c9eb76fac45af8e51")
        let key128 = bytes("2b7e151628aed2a6abf7158809cf4f3c")
        let key256 = bytes("603deb1015ca71be2b73aef0857d77811f352c073b6108d72d9810a30914dff4")
        #expect(
            run(callbacks.aesEncrypt, key: key128, iv: iv, plaintext) == (
                0, bytes("3b3fd92eb72dad20333449f8e83cfb4ac8a64537a0b3a93fcde3cdad9f1ce58b")
            ))
        #expect(
            run(callbacks.aesEncrypt, key: key256, iv: iv, plaintext) == (
                0, bytes("dc7e84bfda79164b7ecd8486985d386039ffed143b28b1c832113c6331e5407b")
            ))
        #expect(
            run(
                callbacks.aesDecrypt, key: key128, iv: iv,
                bytes("3b3fd92eb72dad20333449f8e83cfb4ac8a64537a0b3a93fcde3cdad9f1ce58b")) == (0, plaintext))
        let odd = Array(plaintext.prefix(23))
        let (rc, encrypted) = run(callbacks.aesEncrypt, key: key128, iv: iv, odd)
        #expect(rc == 0 && encrypted == Array(bytes("3b3fd92eb72dad20333449f8e83cfb4ac8a64537a0b3a9").prefix(23)))
        #expect(run(callbacks.aesDecrypt, key: key128, iv: iv, encrypted) == (0, odd))
        var (key, ivCopy, buffer) = (key128, iv, odd)
        // Mode 0x0006 is CBC, not CFB.
        #expect(callbacks.aesEncrypt(&key, 0x0006, 128, 0x0006, &buffer, buffer.count, &ivCopy, nil) == Self.badValue)
    }

    @Test("random nonces are as long as asked (0: the whole buffer), and differ")
    func randomNonces() throws {
        let callbacks = try Callbacks()
        var first = TPM2B_NONCE()
        var second = TPM2B_NONCE()
        #expect(callbacks.random(&first, 32, nil) == 0 && first.size == 32)
        #expect(callbacks.random(&second, 32, nil) == 0)
        #expect(
            withUnsafeBytes(of: first.buffer) { Array($0.prefix(32)) }
                != withUnsafeBytes(of: second.buffer) { Array($0.prefix(32)) })
        var whole = TPM2B_NONCE()
        #expect(callbacks.random(&whole, 0, nil) == 0 && Int(whole.size) == MemoryLayout.size(ofValue: whole.buffer))
        #expect(callbacks.random(&whole, 1000, nil) == Self.badValue)
    }

    @Test(
        "ECDH for a salted session: Z is the shared x-coordinate swift-crypto computes from Q, and Q is marshalled as two TPM2Bs; a point off the curve is refused"
    )
    func ecdhPoint() throws {
        let callbacks = try Callbacks()
        let tpmKey = P256.KeyAgreement.PrivateKey()
        var key = Self.eccPublic(curve: 0x0003, point: Array(tpmKey.publicKey.rawRepresentation))
        var z = TPM2B_ECC_PARAMETER()
        var q = TPMS_ECC_POINT()
        var out = [UInt8](repeating: 0, count: 256)
        var size = 0
        #expect(callbacks.ecdh(&key, out.count, &z, &q, &out, &size, nil) == 0)
        let qx = withUnsafeBytes(of: q.x.buffer) { Array($0.prefix(Int(q.x.size))) }
        let qy = withUnsafeBytes(of: q.y.buffer) { Array($0.prefix(Int(q.y.size))) }
        #expect(qx.count == 32 && qy.count == 32)
        #expect(Array(out.prefix(size)) == [0, 32] + qx + [0, 32] + qy)
        let ephemeral = try P256.KeyAgreement.PublicKey(rawRepresentation: qx + qy)
        let expected = try tpmKey.sharedSecretFromKeyAgreement(with: ephemeral).withUnsafeBytes { Array($0) }
        #expect(withUnsafeBytes(of: z.buffer) { Array($0.prefix(Int(z.size))) } == expected)

        let p384 = P384.KeyAgreement.PrivateKey()
        var key384 = Self.eccPublic(curve: 0x0004, point: Array(p384.publicKey.rawRepresentation))
        #expect(callbacks.ecdh(&key384, out.count, &z, &q, &out, &size, nil) == 0)
        let q384 = try P384.KeyAgreement.PublicKey(
            rawRepresentation: withUnsafeBytes(of: q.x.buffer) { Array($0.prefix(48)) }
                + withUnsafeBytes(of: q.y.buffer) { Array($0.prefix(48)) })
        #expect(
            withUnsafeBytes(of: z.buffer) { Array($0.prefix(Int(z.size))) }
                == (try p384.sharedSecretFromKeyAgreement(with: q384).withUnsafeBytes { Array($0) }))
        #expect(size == 4 + 2 * 48)

        var offCurve = Self.eccPublic(curve: 0x0003, point: Array(repeating: 0x01, count: 64))
        #expect(callbacks.ecdh(&offCurve, out.count, &z, &q, &out, &size, nil) != 0)
        var unknown = Self.eccPublic(curve: 0x0020, point: Array(tpmKey.publicKey.rawRepresentation))
        #expect(callbacks.ecdh(&unknown, out.count, &z, &q, &out, &size, nil) == Self.notImplemented)
        #expect(callbacks.ecdh(&key, 60, &z, &q, &out, &size, nil) == Self.badSize)
    }

    @Test(
        "RSA salt encryption is OAEP with the key's nameAlg and the label with its NUL, as the TPM decrypts it (openssl decrypts it here); randomised; too big for the buffer is BAD_SIZE"
    )
    func rsaSalt() throws {
        let callbacks = try Callbacks()
        let directory = NSTemporaryDirectory() + "esapi-rsa-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: false)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        try Self.openssl([
            "genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-out", directory + "/key.pem",
        ])
        let modulusLine = try Self.openssl(["rsa", "-in", directory + "/key.pem", "-noout", "-modulus"])
        let modulus = bytes(
            String(modulusLine.drop { $0 != "=" }.dropFirst()).trimmingCharacters(in: .whitespacesAndNewlines))
        #expect(modulus.count == 256)

        var key = TPM2B_PUBLIC()
        key.publicArea.type = 0x0001
        key.publicArea.nameAlg = 0x000B
        key.publicArea.parameters.rsaDetail.keyBits = 2048
        key.publicArea.parameters.rsaDetail.scheme.scheme = 0x0017
        withUnsafeMutableBytes(of: &key.publicArea.unique.rsa.buffer) { $0.copyBytes(from: modulus) }
        key.publicArea.unique.rsa.size = UInt16(modulus.count)
        var salt = Array(SHA256.hash(data: Array("a session salt".utf8)))
        var first = [UInt8](repeating: 0, count: 512)
        var second = first
        var firstSize = 0
        var secondSize = 0
        #expect(callbacks.rsaEncrypt(&key, salt.count, &salt, first.count, &first, &firstSize, "SECRET", nil) == 0)
        #expect(callbacks.rsaEncrypt(&key, salt.count, &salt, second.count, &second, &secondSize, "SECRET", nil) == 0)
        #expect(firstSize == 256 && secondSize == 256)
        #expect(first.prefix(256) != second.prefix(256), "OAEP is randomised")
        try Data(first.prefix(firstSize)).write(to: URL(fileURLWithPath: directory + "/salt.enc"))
        // The TPM's label is "SECRET" with its terminating NUL: 53 45 43 52 45 54 00.
        try Self.openssl([
            "pkeyutl", "-decrypt", "-inkey", directory + "/key.pem", "-in", directory + "/salt.enc", "-out",
            directory + "/salt",
            "-pkeyopt", "rsa_padding_mode:oaep", "-pkeyopt", "rsa_oaep_md:sha256", "-pkeyopt", "rsa_mgf1_md:sha256",
            "-pkeyopt", "rsa_oaep_label:53454352455400",
        ])
        #expect(try [UInt8](Data(contentsOf: URL(fileURLWithPath: directory + "/salt"))) == salt)

        #expect(callbacks.rsaEncrypt(&key, salt.count, &salt, 255, &first, &firstSize, "SECRET", nil) == Self.badSize)
        key.publicArea.parameters.rsaDetail.scheme.scheme = 0x0014
        #expect(
            callbacks.rsaEncrypt(&key, salt.count, &salt, first.count, &first, &firstSize, "SECRET", nil)
                == Self.badValue)
    }

    /// Runs the openssl tool (a test dependency, .ci/install-dependencies) and returns its output.
    @discardableResult
    static func openssl(_ arguments: [String]) throws -> String {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/openssl")
        process.arguments = arguments
        let output = Pipe()
        process.standardOutput = output
        process.standardError = FileHandle.nullDevice
        try process.run()
        let data = output.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        try #require(process.terminationStatus == 0, "openssl \(arguments.joined(separator: " ")) failed")
        return String(decoding: data, as: UTF8.self)
    }

    static func eccPublic(curve: UInt16, point: [UInt8]) -> TPM2B_PUBLIC {
        var key = TPM2B_PUBLIC()
        key.publicArea.type = 0x0023
        key.publicArea.nameAlg = 0x000B
        key.publicArea.parameters.eccDetail.curveID = curve
        let half = point.count / 2
        withUnsafeMutableBytes(of: &key.publicArea.unique.ecc.x.buffer) { $0.copyBytes(from: point.prefix(half)) }
        withUnsafeMutableBytes(of: &key.publicArea.unique.ecc.y.buffer) { $0.copyBytes(from: point.suffix(half)) }
        key.publicArea.unique.ecc.x.size = UInt16(half)
        key.publicArea.unique.ecc.y.size = UInt16(half)
        return key
    }
}

private func bytes(_ hex: String) -> [UInt8] {
    var result: [UInt8] = []
    var index = hex.startIndex
    while index < hex.endIndex {
        let next = hex.index(index, offsetBy: 2)
        result.append(UInt8(hex[index..<next], radix: 16)!)
        index = next
    }
    return result
}
