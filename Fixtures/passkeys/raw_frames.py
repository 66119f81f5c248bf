"""Hostile CTAPHID input to the passkey authenticator's socket, with no FIDO library in between.

Usage: raw_frames.py SOCKET MODE. Prints one JSON object: what came back.
  malformed  - CBOR that is not CBOR, a CTAP2 command with a bad map, an unknown command
  frames     - wrong and broadcast channels, interleaved channels, a sequence out of order,
               an oversized length, then a PING on the good channel to show it still answers
  random     - 1,000 random 64-byte reports, then a fresh INIT and PING
  hangup     - a message's first report, then the connection closed mid-message
"""

import json
import os
import random
import socket
import struct
import sys
import threading

BROADCAST = 0xFFFFFFFF


def connect(path):
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(path)
    sock.settimeout(10)
    return sock


def send(sock, report):
    sock.sendall(report.ljust(64, b"\0"))


def receive(sock):
    data = b""
    while len(data) < 64:
        chunk = sock.recv(64 - len(data))
        if not chunk:
            raise OSError("closed")
        data += chunk
    return data


def init_report(cid, cmd, length, data=b""):
    return struct.pack(">IBH", cid, cmd | 0x80, length) + data


def transact(sock, cid, cmd, payload):
    send(sock, init_report(cid, cmd, len(payload), payload[:57]))
    rest, seq = payload[57:], 0
    while rest:
        send(sock, struct.pack(">IB", cid, seq) + rest[:59])
        rest, seq = rest[59:], seq + 1
    return read_message(sock)


def read_message(sock):
    first = receive(sock)
    cid, cmd, length = struct.unpack(">IBH", first[:7])
    data = first[7:7 + length]
    while len(data) < length:
        data += receive(sock)[5:5 + length - len(data)]
    return cid, cmd & 0x7F, data


def allocate(sock):
    nonce = os.urandom(8)
    _, cmd, data = transact(sock, BROADCAST, 0x06, nonce)
    assert cmd == 0x06 and data[:8] == nonce, (cmd, data)
    return struct.unpack(">I", data[8:12])[0]


def error_of(message):
    _, cmd, data = message
    return ("error", data[0]) if cmd == 0x3F else ("cmd", cmd, data[:1].hex())


def main():
    path, mode = sys.argv[1], sys.argv[2]
    sock = connect(path)
    result = {}
    if mode == "malformed":
        cid = allocate(sock)
        result["not_cbor"] = transact(sock, cid, 0x10, bytes([0x01, 0xFF, 0x00]))[2].hex()
        result["not_a_map"] = transact(sock, cid, 0x10, bytes([0x01, 0x83, 0x01, 0x02, 0x03]))[2].hex()
        result["missing"] = transact(sock, cid, 0x10, bytes([0x01, 0xA0]))[2].hex()
        result["truncated"] = transact(sock, cid, 0x10, bytes([0x02, 0xA2, 0x01, 0x6B]))[2].hex()
        result["unknown_command"] = transact(sock, cid, 0x10, bytes([0x55]))[2].hex()
        result["empty"] = transact(sock, cid, 0x10, b"")[2].hex()
        result["huge_array"] = transact(sock, cid, 0x10, bytes([0x01, 0xA1, 0x01, 0x9B]) + b"\xff" * 8)[2].hex()
        result["msg"] = error_of(transact(sock, cid, 0x03, b"\x00\x01"))
    elif mode == "retries":
        # clientPIN's retry counts as a CTAP 2.0 platform asks for them (libfido2 does): with
        # pinUvAuthProtocol 1, which these subcommands do not use. Status byte, then the map's hex.
        cid = allocate(sock)
        for name, subcommand in (("pin", 0x01), ("uv", 0x07)):
            answer = transact(sock, cid, 0x10, bytes([0x06, 0xA2, 0x01, 0x01, 0x02, subcommand]))[2]
            result[name] = [answer[0], answer[1:].hex()]
    elif mode == "frames":
        cid = allocate(sock)
        other = allocate(sock)
        send(sock, init_report(0x12345678, 0x01, 1, b"x"))
        result["unknown_channel"] = error_of(read_message(sock))
        send(sock, init_report(BROADCAST, 0x01, 1, b"x"))
        result["broadcast_ping"] = error_of(read_message(sock))
        send(sock, init_report(cid, 0x10, 8000))
        result["oversized"] = error_of(read_message(sock))
        send(sock, init_report(cid, 0x01, 100, b"a" * 57))
        send(sock, init_report(other, 0x01, 1, b"b"))
        result["interleaved"] = error_of(read_message(sock))
        send(sock, struct.pack(">IB", cid, 5) + b"c" * 59)
        result["sequence"] = error_of(read_message(sock))
        result["ping_after"] = transact(sock, cid, 0x01, b"still here" * 30)[2] == b"still here" * 30
    elif mode == "random":
        rng = random.Random(int(sys.argv[3]) if len(sys.argv) > 3 else 47)
        replies = []
        marker = os.urandom(8)

        def read_until_marker():
            # Replies come in order: the INIT sent after the noise answers last.
            while True:
                cid, cmd, data = read_message(sock)
                replies.append(cmd)
                if cid == BROADCAST and cmd == 0x06 and data[:8] == marker:
                    return

        reader = threading.Thread(target=read_until_marker)
        reader.start()
        for _ in range(1000):
            send(sock, bytes(rng.getrandbits(8) for _ in range(64)))
        send(sock, init_report(BROADCAST, 0x06, 8, marker))
        reader.join(60)
        # Whatever state the noise left, a new client's INIT and PING are answered.
        fresh = connect(path)
        cid = allocate(fresh)
        result["replies"] = len(replies)
        result["marker_answered"] = not reader.is_alive()
        result["ping_after"] = transact(fresh, cid, 0x01, b"ping")[2] == b"ping"
    elif mode == "hangup":
        cid = allocate(sock)
        send(sock, init_report(cid, 0x10, 300, b"\x01" * 57))
        sock.close()
        fresh = connect(path)
        cid = allocate(fresh)
        result["ping_after"] = transact(fresh, cid, 0x01, b"ping")[2] == b"ping"
    else:
        raise SystemExit("unknown mode " + mode)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
