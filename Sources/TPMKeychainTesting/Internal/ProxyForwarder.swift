// The proxy's machinery: one accepting thread per channel, two pumping threads per connection.
// Blocking sockets throughout; stop() wakes blocked threads with shutdown(2), joins them, and only
// then closes descriptors, so no thread ever touches a descriptor number that was reused.

import SystemCalls
import TPMSimulator

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

final class ProxyForwarder: Sendable {
    struct Record: Sendable {
        var bytes: [UInt8] = []
        var commandCodes: [UInt32] = []
    }

    private struct State: Sendable {
        var record = Record()
        var stopped = false
        /// Connection descriptors still open; closed by whoever finishes with them, under the lock.
        var openDescriptors: Set<Int32> = []
        var pumpThreads: [JoinableThread] = []
        var acceptThreads: [JoinableThread] = []
    }

    private enum Channel { case command, control }

    let listenPort: Int
    private let commandListener: Int32
    private let controlListener: Int32
    private let upstreamHost: String
    private let upstreamPort: Int
    /// Each command is held back this long before it is forwarded (nil: at once).
    private let latency: TPMLatencyProfile?
    private let state = Locked(State())

    private init(
        listenPort: Int, commandListener: Int32, controlListener: Int32, upstreamHost: String, upstreamPort: Int,
        latency: TPMLatencyProfile?
    ) {
        self.listenPort = listenPort
        self.commandListener = commandListener
        self.controlListener = controlListener
        self.upstreamHost = upstreamHost
        self.upstreamPort = upstreamPort
        self.latency = latency
    }

    static func start(
        upstreamHost: String, upstreamPort: Int, latency: TPMLatencyProfile? = nil
    ) throws(RecordingTPMProxyError) -> ProxyForwarder {
        let pair: (port: Int, first: Int32, second: Int32)
        do {
            pair = try LoopbackSocket.listenOnConsecutivePorts()
        } catch {
            throw RecordingTPMProxyError(
                .listenFailed, "cannot listen on two consecutive loopback ports: \(error)", systemErrno: error.rawValue)
        }
        let forwarder = ProxyForwarder(
            listenPort: pair.port, commandListener: pair.first, controlListener: pair.second,
            upstreamHost: upstreamHost, upstreamPort: upstreamPort, latency: latency)
        do {
            let command = try proxyThread { [forwarder] in forwarder.acceptLoop(.command) }
            forwarder.state.withLock { $0.acceptThreads.append(command) }
            let control = try proxyThread { [forwarder] in forwarder.acceptLoop(.control) }
            forwarder.state.withLock { $0.acceptThreads.append(control) }
        } catch {
            forwarder.stop()
            throw error
        }
        return forwarder
    }

    func snapshot() -> Record { state.withLock { $0.record } }

    func reset() { state.withLock { $0.record = Record() } }

    func stop() {
        let acceptThreads: [JoinableThread]? = state.withLock { state in
            guard !state.stopped else { return nil }
            state.stopped = true
            // Under the lock, so a pump cannot close (and the kernel reuse) a descriptor between
            // our looking it up and shutting it down.
            for fd in state.openDescriptors { LoopbackSocket.shutdownBoth(fd) }
            return state.acceptThreads
        }
        guard let acceptThreads else { return }
        LoopbackSocket.shutdownBoth(commandListener)
        LoopbackSocket.shutdownBoth(controlListener)
        for thread in acceptThreads { thread.join() }
        // No accept loop runs any more, so no new pumps can appear.
        let pumps = state.withLock { $0.pumpThreads }
        for thread in pumps { thread.join() }
        closeDescriptor(commandListener)
        closeDescriptor(controlListener)
    }

    private func acceptLoop(_ channel: Channel) {
        let listener = channel == .command ? commandListener : controlListener
        let target = channel == .command ? upstreamPort : upstreamPort + 1
        while true {
            let client: Int32
            do {
                client = try LoopbackSocket.acceptConnection(listener)
            } catch {
                if state.withLock({ $0.stopped }) { return }
                if error.rawValue == ECONNABORTED || error.rawValue == EMFILE || error.rawValue == ENFILE {
                    sleep(for: .milliseconds(10))
                    continue
                }
                return
            }
            let upstream: Int32
            do {
                upstream = try LoopbackSocket.connectTCP(host: upstreamHost, port: target, timeout: nil)
            } catch {
                closeDescriptor(client) // The client sees EOF, as it would with the TPM down.
                continue
            }
            let connection = Connection(client: client, upstream: upstream)
            let registered: Bool = state.withLock { state in
                guard !state.stopped else { return false }
                state.openDescriptors.formUnion([client, upstream])
                return true
            }
            guard registered else {
                closeDescriptor(client)
                closeDescriptor(upstream)
                return
            }
            do {
                let toTPM = try proxyThread { [self] in
                    pump(from: client, to: upstream, channel: channel, parsing: true, connection: connection)
                }
                state.withLock { $0.pumpThreads.append(toTPM) }
                let fromTPM = try proxyThread { [self] in
                    pump(from: upstream, to: client, channel: channel, parsing: false, connection: connection)
                }
                state.withLock { $0.pumpThreads.append(fromTPM) }
            } catch {
                // Without its partner a pump would wait forever; cut the connection instead.
                state.withLock { _ in
                    LoopbackSocket.shutdownBoth(client)
                    LoopbackSocket.shutdownBoth(upstream)
                }
                connection.finishOne(self)
                connection.finishOne(self)
            }
        }
    }

    /// Copies one direction until EOF or error, recording command-channel traffic.
    private func pump(
        from source: Int32, to destination: Int32, channel: Channel, parsing: Bool, connection: Connection
    ) {
        var parser = CommandStreamParser()
        while true {
            let chunk: [UInt8]
            do {
                chunk = try LoopbackSocket.receive(source, maximum: 64 * 1024)
            } catch {
                break
            }
            if chunk.isEmpty { break }
            if channel == .command {
                let codes = parsing ? parser.consume(chunk) : []
                state.withLock { state in
                    state.record.bytes += chunk
                    state.record.commandCodes += codes
                }
                // Held back by its cost, the command reaches the TPM that much later, as on a slower one.
                if let latency, !codes.isEmpty { sleep(for: latency.cost(of: codes)) }
            }
            do {
                try LoopbackSocket.sendAll(destination, chunk)
            } catch {
                break
            }
        }
        // Pass the end of stream on (swtpm drops the client on EOF), and stop the partner
        // direction if we ended on an error.
        state.withLock { state in
            if state.openDescriptors.contains(destination) { _ = shutdown(destination, Int32(SHUT_WR)) }
            if state.openDescriptors.contains(source) { _ = shutdown(source, Int32(SHUT_RD)) }
        }
        connection.finishOne(self)
    }

    /// What a resource manager does when a client's connection closes: every transient object
    /// and loaded session the TPM holds is flushed, over a connection of the proxy's own (not
    /// recorded).
    func flushLeftovers() {
        guard
            let upstream = try? LoopbackSocket.connectTCP(host: upstreamHost, port: upstreamPort, timeout: .seconds(10))
        else { return }
        defer { closeDescriptor(upstream) }
        for first: UInt32 in [0x8000_0000, 0x0200_0000] {
            // TPM2_GetCapability(TPM_CAP_HANDLES, first, 64), no sessions.
            let command: [UInt8] =
                [0x80, 0x01, 0, 0, 0, 22, 0, 0, 0x01, 0x7A, 0, 0, 0, 1] + bigEndian(first) + bigEndian(64)
            guard let response = transact(upstream, command), response.count >= 19 else { return }
            let count = Int(readBigEndian(response, at: 15))
            for index in 0..<count where 19 + index * 4 + 4 <= response.count {
                // TPM2_FlushContext(handle).
                let handle = readBigEndian(response, at: 19 + index * 4)
                _ = transact(upstream, [0x80, 0x01, 0, 0, 0, 14, 0, 0, 0x01, 0x65] + bigEndian(handle))
            }
        }
    }

    /// Sends one command and reads its whole response; nil on a socket error.
    private func transact(_ socket: Int32, _ command: [UInt8]) -> [UInt8]? {
        do {
            try LoopbackSocket.sendAll(socket, command)
            let header = try LoopbackSocket.receiveExactly(socket, count: 10)
            let size = Int(readBigEndian(header, at: 2))
            return header + (size > 10 ? try LoopbackSocket.receiveExactly(socket, count: size - 10) : [])
        } catch {
            return nil
        }
    }

    fileprivate func closeConnection(_ connection: Connection) {
        state.withLock { state in
            state.openDescriptors.remove(connection.client)
            state.openDescriptors.remove(connection.upstream)
            closeDescriptor(connection.client)
            closeDescriptor(connection.upstream)
        }
    }
}

/// One proxied connection; its descriptors are closed when both directions have finished.
private final class Connection: Sendable {
    let client: Int32
    let upstream: Int32
    private let remaining = Locked(2)

    init(client: Int32, upstream: Int32) {
        self.client = client
        self.upstream = upstream
    }

    func finishOne(_ forwarder: ProxyForwarder) {
        let last = remaining.withLock { count in
            count -= 1
            return count == 0
        }
        if last { forwarder.closeConnection(self) }
    }
}

/// A joinable thread, its failure to start reported as the proxy's error.
private func proxyThread(_ body: @escaping @Sendable () -> Void) throws(RecordingTPMProxyError) -> JoinableThread {
    do {
        return try JoinableThread(body)
    } catch {
        throw RecordingTPMProxyError(.threadCreationFailed, "cannot start a proxy thread", systemErrno: error.rawValue)
    }
}

private func bigEndian(_ value: UInt32) -> [UInt8] { [24, 16, 8, 0].map { UInt8(truncatingIfNeeded: value >> $0) } }

private func readBigEndian(_ bytes: [UInt8], at offset: Int) -> UInt32 {
    bytes[offset..<offset + 4].reduce(0) { $0 << 8 | UInt32($1) }
}
