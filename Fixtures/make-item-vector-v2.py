#!/usr/bin/env python3
"""Writes Fixtures/item-v2.json: two format-2 item files (a generic and an internet password)
computed from docs/FORMAT.md alone ("Item file, format 2", "Attributes, format 2", "Names, format 2").

A second implementation of the format, independent of the Swift code; ItemFormatV2VectorTests
checks that the Swift codec writes exactly these bytes and reads them back.
Run: python3 Fixtures/make-item-vector-v2.py (needs the `cryptography` package).
"""
import hashlib, hmac, json, struct
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

def hkdf(ikm, salt, info):
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=salt or None, info=info).derive(ikm)

def fourcc(text): return struct.unpack(">I", text.encode())[0]

def tlv(attributes):
    """Attributes, format 2: (tag, UINT32 length, value) in ascending tag order."""
    return b"".join(struct.pack(">II", fourcc(tag), len(value)) + value
                    for tag, value in sorted(attributes.items(), key=lambda item: fourcc(item[0])))

PRIMARY_KEYS = {
    "genp": ["agrp", "svce", "acct", "sync"],
    "inet": ["agrp", "srvr", "ptcl", "port", "path", "acct", "atyp", "sdmn", "sync"],
}

def primary_key(item_class, attributes):
    out = struct.pack(">I", fourcc(item_class))
    for tag in PRIMARY_KEYS[item_class]:
        value = attributes.get(tag, b"")
        if tag == "sync" and value == b"":
            value = b"\x00"
        out += struct.pack(">II", fourcc(tag), len(value)) + value
    return out

def names(names_key, domain, encoded):
    return hmac.new(names_key, domain.encode() + encoded, hashlib.sha256).digest()[:16].hex()

master = bytes(range(0x00, 0x20))
store_id = bytes(range(0xA0, 0xB0))
items_key = hkdf(master, store_id, b"TPMKeychain v1 item keys")   # the master key record's item-key parent
names_key = hkdf(master, store_id, b"TPMKeychain v1 names")

def item(item_class, item_id, generation, accessibility, kind, attributes, value, salt, nonce):
    record = bytes(16)   # the store's master key record
    plain = tlv(attributes)
    header = (b"TKIT" + struct.pack(">HH", 2, 124) + store_id + item_id + struct.pack(">Q", generation)
              + struct.pack(">I", fourcc(item_class)) + record + bytes([accessibility, kind]) + b"\x00\x00"
              + salt + nonce + struct.pack(">II", len(plain), len(value)))
    assert len(header) == 124
    key = hkdf(items_key, salt, b"TPMKeychain v2 item" + store_id + record)
    attributes_section = AESGCM(key).encrypt(nonce, plain, header)
    second_nonce = nonce[:-1] + bytes([nonce[-1] ^ 1])
    secret = AESGCM(key).encrypt(second_nonce, value, header + primary_key(item_class, attributes) + attributes_section)
    group_tag = "srvr" if item_class == "inet" else "svce"
    group = struct.pack(">I", fourcc(item_class))
    for tag in ("agrp", group_tag):
        group += struct.pack(">I", len(attributes.get(tag, b""))) + attributes.get(tag, b"")
    return {
        "class": item_class, "itemID": item_id.hex(), "generation": generation, "accessibility": accessibility,
        "valueKind": kind, "attributes": {tag: value.hex() for tag, value in attributes.items()}, "value": value.hex(),
        "salt": salt.hex(), "nonce": nonce.hex(),
        "groupDirectory": names(names_key, "group2", group),
        "fileName": names(names_key, "item2", primary_key(item_class, attributes)) + ".item",
        "file": (header + attributes_section + secret).hex(),
    }

ns = lambda value: struct.pack(">q", value)
generic = item("genp", bytes(range(0xB0, 0xC0)), 3, 4, 1, {
    "svce": b"com.example.api", "acct": b"alice", "labl": b"API token", "gena": bytes([1, 2]),
    "cdat": ns(1_700_000_000_000_000_001), "mdat": ns(1_700_000_123_456_000_000),
    "zzzz": b"a tag this version does not know",
}, b"correct horse battery staple", bytes(range(0xC0, 0xE0)), bytes(range(0xE0, 0xEC)))
internet = item("inet", bytes(range(0x10, 0x20)), 1, 1, 0, {
    "agrp": b"group.example", "srvr": b"git.example.com", "ptcl": b"htps", "port": struct.pack(">I", 443),
    "path": b"/org/repo.git", "acct": b"bob", "atyp": b"dflt", "sync": b"\x00",
    "cdat": ns(1_700_000_000_000_000_000), "mdat": ns(1_700_000_000_000_000_000),
}, bytes([0xFF, 0x00, 0x41]), bytes(range(0x40, 0x60)), bytes(range(0x60, 0x6C)))

vector = {
    "about": "Item files, format 2, computed by Fixtures/make-item-vector-v2.py from docs/FORMAT.md, independently of the Swift code.",
    "masterKey": master.hex(), "storeID": store_id.hex(),
    "items": [generic, internet],
}
with open(__file__.replace("make-item-vector-v2.py", "item-v2.json"), "w") as out:
    json.dump(vector, out, indent=2)
    out.write("\n")
print("wrote item-v2.json")
