internal import CTSS2

// TPM2B buffers are handled as raw bytes (UINT16 size at offset 0, bytes from offset 2) rather
// than through their imported tuples: generic code over a tuple such as TPM2B_PRIVATE's
// 1,550 elements makes compile times explode, and raw bytes are what gets zeroized anyway.

/// Allocates a zero-filled C structure on the heap, hands it to `body`, then zeroizes and frees it,
/// so sensitive inputs never linger on the Swift stack or in freed memory.
func withZeroedStructure<T, R, E: Error>(
    _ type: T.Type, _ body: (UnsafeMutablePointer<T>) throws(E) -> R
) throws(E) -> R {
    let pointer = UnsafeMutableRawPointer.allocate(
        byteCount: MemoryLayout<T>.size, alignment: MemoryLayout<T>.alignment)
    pointer.initializeMemory(as: UInt8.self, repeating: 0, count: MemoryLayout<T>.size)
    let typed = pointer.bindMemory(to: T.self, capacity: 1)
    defer {
        secureZero(pointer, count: MemoryLayout<T>.size)
        pointer.deallocate()
    }
    return try body(typed)
}

/// Writes `bytes` into the TPM2B at `raw` whose whole structure is `structureSize` bytes.
///
/// - Throws: ``TPMError`` `.invalidArgument` when the bytes do not fit.
func fillSized(
    _ raw: UnsafeMutableRawPointer, structureSize: Int, with bytes: UnsafeRawBufferPointer,
    what: String
) throws(TPMError) {
    let capacity = structureSize - 2
    guard bytes.count <= capacity else {
        throw TPMError(.invalidArgument, "\(what) is \(bytes.count) bytes; the TPM takes at most \(capacity)")
    }
    raw.storeBytes(of: UInt16(bytes.count), as: UInt16.self)
    if let base = bytes.baseAddress, bytes.count > 0 {
        (raw + 2).copyMemory(from: base, byteCount: bytes.count)
    }
}

/// Fills a whole TPM2B structure of type `T` with `bytes`.
func fillSized<T>(_ pointer: UnsafeMutablePointer<T>, with bytes: UnsafeRawBufferPointer, what: String) throws(TPMError)
{
    try fillSized(UnsafeMutableRawPointer(pointer), structureSize: MemoryLayout<T>.size, with: bytes, what: what)
}

/// Fills a whole TPM2B structure of type `T` with `bytes`.
func fillSized<T>(_ pointer: UnsafeMutablePointer<T>, with bytes: [UInt8], what: String) throws {
    try bytes.withUnsafeBytes { buffer in try fillSized(pointer, with: buffer, what: what) }
}

/// The bytes of a TPM2B, with the size checked against the structure before reading.
func sizedBytes(_ raw: UnsafeRawPointer, structureSize: Int) throws(TPMError) -> UnsafeRawBufferPointer {
    let size = Int(raw.loadUnaligned(as: UInt16.self))
    guard size <= structureSize - 2 else {
        throw TPMError(.malformedData, "A TPM2B claims \(size) bytes in a \(structureSize - 2)-byte buffer")
    }
    return UnsafeRawBufferPointer(start: raw + 2, count: size)
}

/// Takes ownership of a structure ESAPI allocated: `read` copies what it needs, then the memory is
/// zeroized and released with `Esys_Free`, on every path.
///
/// - Throws: what `read` throws, or ``TPMError`` `.malformedData` when ESAPI returned no structure.
func takeFromEsys<T, R, E: Error>(
    _ pointer: UnsafeMutablePointer<T>?, _ what: String,
    _ read: (UnsafeMutablePointer<T>) throws(E) -> R
) throws -> R {
    guard let pointer else { throw TPMError(.malformedData, "ESAPI returned no \(what)") }
    defer {
        secureZero(pointer, count: MemoryLayout<T>.size)
        Esys_Free(pointer)
    }
    return try read(pointer)
}

/// Releases an ESAPI output the caller does not need, zeroizing it first.
func discardFromEsys<T>(_ pointer: UnsafeMutablePointer<T>?) {
    guard let pointer else { return }
    secureZero(pointer, count: MemoryLayout<T>.size)
    Esys_Free(pointer)
}

/// Copies the bytes of a TPM2B that ESAPI allocated and releases it.
func takeSizedFromEsys<T>(_ pointer: UnsafeMutablePointer<T>?, _ what: String) throws -> [UInt8] {
    try takeFromEsys(pointer, what) { (typed) throws(TPMError) -> [UInt8] in
        Array(try sizedBytes(UnsafeRawPointer(typed), structureSize: MemoryLayout<T>.size))
    }
}

/// Copies the bytes of a secret TPM2B that ESAPI allocated straight into ``SecretBytes``.
func takeSecretFromEsys<T>(_ pointer: UnsafeMutablePointer<T>?, _ what: String) throws -> SecretBytes {
    try takeFromEsys(pointer, what) { (typed) throws(TPMError) -> SecretBytes in
        SecretBytes(copying: try sizedBytes(UnsafeRawPointer(typed), structureSize: MemoryLayout<T>.size))
    }
}

/// Tss2_MU: canonical bytes into a C structure, requiring every byte to be consumed.
typealias Unmarshaller<T> = (UnsafePointer<UInt8>?, Int, UnsafeMutablePointer<Int>?, UnsafeMutablePointer<T>?) ->
    TSS2_RC
/// Tss2_MU: a C structure into canonical bytes.
typealias Marshaller<T> = (UnsafePointer<T>?, UnsafeMutablePointer<UInt8>?, Int, UnsafeMutablePointer<Int>?) -> TSS2_RC

func unmarshal<T>(
    _ bytes: [UInt8], into pointer: UnsafeMutablePointer<T>, using function: Unmarshaller<T>,
    _ what: String
) throws(TPMError) {
    var offset = 0
    let rc = bytes.withUnsafeBufferPointer { function($0.baseAddress, $0.count, &offset, pointer) }
    try check(rc, "unmarshalling \(what)")
    guard offset == bytes.count else {
        throw TPMError(.malformedData, "\(what) has \(bytes.count - offset) trailing bytes")
    }
}

func marshal<T>(_ pointer: UnsafePointer<T>, using function: Marshaller<T>, _ what: String) throws(TPMError) -> [UInt8]
{
    var buffer = [UInt8](repeating: 0, count: MemoryLayout<T>.size + 16)
    var offset = 0
    let rc = buffer.withUnsafeMutableBufferPointer { function(pointer, $0.baseAddress, $0.count, &offset) }
    try check(rc, "marshalling \(what)")
    return Array(buffer[0..<offset])
}
