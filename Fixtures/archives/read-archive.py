#!/usr/bin/python3
"""A second reader of tpm-keychain export archives (TKAR version 1, passphrase protection),
written from docs/FORMAT.md, "Export archives", alone. Prints the archive as JSON: when it was
made, its items (class, accessibility, kind, attributes, value; bytes as hex) and, with
--derivation, the intermediate values of the key schedule.

Usage: read-archive.py ARCHIVE [--derivation]   (the passphrase on standard input, one line)
Exits 1, saying why on stderr, for an archive that does not open or does not parse.
"""
import hashlib
import json
import struct
import sys

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF


def fail(message):
    print("read-archive: " + message, file=sys.stderr)
    sys.exit(1)


def attributes(data):
    entries, offset, previous = {}, 0, None
    while offset < len(data):
        if offset + 8 > len(data):
            fail("truncated attribute entry")
        tag, length = struct.unpack(">4sI", data[offset:offset + 8])
        if previous is not None and tag <= previous:
            fail("attributes out of order")
        value = data[offset + 8:offset + 8 + length]
        if len(value) != length:
            fail("truncated attribute value")
        entries[tag.decode("latin-1")] = value.hex()
        previous, offset = tag, offset + 8 + length
    return entries


def main():
    path = sys.argv[1]
    derivation = "--derivation" in sys.argv[2:]
    passphrase = sys.stdin.buffer.readline().rstrip(b"\n")
    data = open(path, "rb").read()
    if data[0:4] != b"TKAR" or len(data) < 6:
        fail("not an archive")
    if data[4] != 1:
        fail("version %d" % data[4])
    if data[5] != 1:
        fail("only passphrase archives can be read without a TPM")
    if len(data) < 43:
        fail("truncated header")
    log2n, r, p = data[6], struct.unpack(">H", data[7:9])[0], struct.unpack(">H", data[9:11])[0]
    if not (10 <= log2n <= 20 and 1 <= r <= 32 and 1 <= p <= 16 and 128 * r * (1 << log2n) <= 1 << 30):
        fail("scrypt parameters out of range")
    header, salt = data[0:43], data[11:43]
    secret = hashlib.scrypt(passphrase, salt=salt, n=1 << log2n, r=r, p=p, maxmem=2 ** 31 - 1, dklen=32)
    key = HKDF(algorithm=hashes.SHA256(), length=32, salt=salt, info=b"TPMKeychain archive v1" + header).derive(secret)
    aead = AESGCM(key)

    records, offset, index = [], 43, 0
    while offset < len(data):
        if offset + 4 > len(data):
            fail("truncated chunk length")
        length_bytes = data[offset:offset + 4]
        length = struct.unpack(">I", length_bytes)[0]
        if length < 16 or length > (20 << 20) + 16:
            fail("chunk length out of range")
        chunk = data[offset + 4:offset + 4 + length]
        if len(chunk) != length:
            fail("truncated chunk")
        offset += 4 + length
        final = offset == len(data)
        nonce = struct.pack(">Q", index) + b"\x00\x00\x00" + (b"\x01" if final else b"\x00")
        try:
            records.append(aead.decrypt(nonce, chunk, length_bytes))
        except Exception:
            fail("chunk %d does not open" % index)
        index += 1

    result = {"items": []}
    if derivation:
        result["derivation"] = {
            "salt": salt.hex(), "scrypt": secret.hex(), "archiveKey": key.hex(),
            "firstNonce": (struct.pack(">Q", 0) + b"\x00\x00\x00\x00").hex(),
            "beginRecord": records[0].hex() if records else None,
        }
    if len(records) < 2 or records[0][0] != 1 or len(records[0]) != 9 or records[-1][0] != 3 or len(records[-1]) != 9:
        fail("records out of order")
    result["created"] = struct.unpack(">q", records[0][1:9])[0]
    for record in records[1:-1]:
        if record[0] != 2:
            fail("records out of order")
        item_class, accessibility, kind = struct.unpack(">4sBB", record[1:7])
        a = struct.unpack(">I", record[7:11])[0]
        attribute_bytes = record[11:11 + a]
        v = struct.unpack(">I", record[11 + a:15 + a])[0]
        value = record[15 + a:15 + a + v]
        if len(attribute_bytes) != a or len(value) != v or 15 + a + v != len(record):
            fail("malformed item record")
        result["items"].append({
            "class": item_class.decode("ascii"), "accessibility": accessibility, "kind": kind,
            "attributes": attributes(attribute_bytes), "value": value.hex(),
        })
    if struct.unpack(">Q", records[-1][1:9])[0] != len(result["items"]):
        fail("item count does not match")
    json.dump(result, sys.stdout, indent=1, sort_keys=True)
    print()


main()
