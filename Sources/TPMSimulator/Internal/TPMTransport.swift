// swtpm's two channels (TCP ports or Unix sockets, see SimulatorEndpoint). Both carry big-endian data. The command channel carries raw TPM 2.0
// command/response buffers (TPM 2.0 Part 1 §18: tag UINT16, size UINT32, code UINT32); the control
// channel carries a UINT32 command code followed by the request part of the matching struct in
// swtpm's include/swtpm/tpm_ioctl.h, and returns that struct's response part, which always starts
// with a UINT32 result (0 = success).
//
// A fresh connection is opened per request: swtpm serves a single command client at a time, so
// holding a connection open would lock out every TSS context the user creates.

import SystemCalls
import WireFormat

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// A complete TPM response buffer.
struct TPMResponse: Sendable {
    let bytes: [UInt8]
    var responseCode: UInt32 { bytes.bigEndianUInt32(at: 6) }
}

/// Control channel command codes (the non-CUSE `CMD_*` enum in swtpm's tpm_ioctl.h).
enum ControlCommand: UInt32 {
    case getCapability = 0x01
    /// Request: UINT32 init flags. Response: UINT32 result. Performs _TPM_Init: the TPM then
    /// needs TPM2_Startup again, exactly like after a reboot.
    case initialize = 0x02
    /// Response: UINT32 result; swtpm then exits.
    case shutdown = 0x03
}

enum TPMTransport {
    static let headerSize = 10
    /// swtpm's largest buffer is 4 KiB; anything far beyond that is a framing error, and the
    /// size is checked before allocating.
    static let maximumResponseSize = 64 * 1024

    /// Sends one command on a fresh connection and returns the whole response.
    ///
    /// - Throws: ``SoftwareTPMError/Code/commandChannelFailed`` for I/O failures and malformed
    ///   responses. A non-zero response code is *not* an error here; see `execute`.
    static func transmit(
        _ command: [UInt8], endpoint: SimulatorEndpoint, timeout: Duration
    ) throws(SoftwareTPMError) -> TPMResponse {
        let port = endpoint.description
        let fd: Int32
        do {
            fd = try endpoint.connect(control: false, timeout: timeout)
        } catch {
            throw SoftwareTPMError(
                .commandChannelFailed, "cannot connect to the TPM command channel (\(port))", cause: error)
        }
        defer { closeDescriptor(fd) }
        do {
            try LoopbackSocket.sendAll(fd, command)
            let header = try LoopbackSocket.receiveExactly(fd, count: 6)
            let size = Int(header.bigEndianUInt32(at: 2))
            guard size >= headerSize, size <= maximumResponseSize else {
                throw SoftwareTPMError(
                    .commandChannelFailed,
                    "the TPM at \(port) sent a response of impossible size \(size); is something else listening there?")
            }
            let rest = try LoopbackSocket.receiveExactly(fd, count: size - 6)
            return TPMResponse(bytes: header + rest)
        } catch let error as Errno {
            let hint =
                error.rawValue == ETIMEDOUT
                ? " (swtpm serves one command connection at a time: is a TSS context still connected?)" : ""
            throw SoftwareTPMError(
                .commandChannelFailed, "TPM command exchange with \(port) failed\(hint)", cause: error)
        } catch let error as SoftwareTPMError {
            throw error
        } catch {
            throw SoftwareTPMError(.commandChannelFailed, "TPM command exchange with \(port) failed: \(error)")
        }
    }

    /// Sends a command and insists on TPM_RC_SUCCESS.
    ///
    /// - Throws: ``SoftwareTPMError/Code/commandFailed(responseCode:)`` with the TPM's code, or a
    ///   channel failure from `transmit`.
    @discardableResult
    static func execute(
        _ command: [UInt8], name: String, endpoint: SimulatorEndpoint, timeout: Duration
    ) throws(SoftwareTPMError) -> TPMResponse {
        let response = try transmit(command, endpoint: endpoint, timeout: timeout)
        let code = response.responseCode
        guard code == 0 else {
            throw SoftwareTPMError(
                .commandFailed(responseCode: code),
                "\(name) failed with TPM_RC 0x\(String(code, radix: 16, uppercase: true)); decode it with `tpm2_rc_decode 0x\(String(code, radix: 16))`"
            )
        }
        return response
    }

    /// Sends one control command and checks its UINT32 result.
    ///
    /// - Throws: ``SoftwareTPMError/Code/controlChannelFailed`` on I/O failure or a non-zero result.
    static func control(
        _ command: ControlCommand, payload: [UInt8] = [], endpoint: SimulatorEndpoint, timeout: Duration
    ) throws(SoftwareTPMError) {
        let port = endpoint.description
        let fd: Int32
        do {
            fd = try endpoint.connect(control: true, timeout: timeout)
        } catch {
            throw SoftwareTPMError(
                .controlChannelFailed, "cannot connect to the swtpm control channel (\(port))", cause: error)
        }
        defer { closeDescriptor(fd) }
        let result: UInt32
        do {
            var request = [UInt8]()
            request.appendBigEndian(command.rawValue)
            request += payload
            try LoopbackSocket.sendAll(fd, request)
            result = try LoopbackSocket.receiveExactly(fd, count: 4).bigEndianUInt32(at: 0)
        } catch {
            throw SoftwareTPMError(.controlChannelFailed, "control command \(command) to \(port) failed", cause: error)
        }
        guard result == 0 else {
            throw SoftwareTPMError(
                .controlChannelFailed,
                "swtpm answered control command \(command) with result 0x\(String(result, radix: 16))")
        }
    }
}

extension [UInt8] {
    mutating func appendBigEndian<T: FixedWidthInteger>(_ value: T) {
        BigEndian.append(value, to: &self)
    }
}

extension Collection<UInt8> where Index == Int {
    /// Reads a big-endian UINT32; the caller has checked the bounds.
    func bigEndianUInt32(at offset: Int) -> UInt32 {
        BigEndian.integer(self[(startIndex + offset)..<(startIndex + offset + 4)])
    }
}
