#!/usr/bin/env python3
"""Writes Fixtures/item-v1.json: a TPMKeychain item file computed from docs/FORMAT.md alone.

This is a second implementation of the item format, independent of the Swift code; the Swift
test ItemFormatVectorTests checks that the store writes exactly these bytes and reads them back.
Run: python3 Fixtures/make-item-vector.py (needs the `cryptography` package).
"""
import hashlib, hmac, json, struct
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

def hkdf(ikm, salt, info):
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=salt or None, info=info).derive(ikm)

def sized16(b): return struct.pack(">H", len(b)) + b

def name(names_key, domain, *fields):
    message = domain.encode() + b"".join(struct.pack(">I", len(f.encode())) + f.encode() for f in fields)
    return hmac.new(names_key, message, hashlib.sha256).digest()[:16].hex()

inputs = {
    "masterKey": bytes(range(0x00, 0x20)), "storeID": bytes(range(0xA0, 0xB0)), "itemID": bytes(range(0xB0, 0xC0)),
    "generation": 3, "accessibility": 4, "valueKind": 1,
    "salt": bytes(range(0xC0, 0xE0)), "nonce": bytes(range(0xE0, 0xEC)),
    "accessGroup": "", "service": "com.example.api", "account": "alice", "label": "API token", "comment": None,
    "genericData": bytes([1, 2]), "creationMilliseconds": 1_700_000_000_000, "modificationMilliseconds": 1_700_000_123_456,
    "value": "correct horse battery staple".encode(),
}
master, store_id = inputs["masterKey"], inputs["storeID"]
items_key = hkdf(master, store_id, b"TPMKeychain v1 item keys")
names_key = hkdf(master, store_id, b"TPMKeychain v1 names")
item_key = hkdf(items_key, inputs["salt"], b"TPMKeychain v1 item" + store_id)

attributes = sized16(inputs["accessGroup"].encode()) + sized16(inputs["service"].encode()) + sized16(inputs["account"].encode())
for optional in (inputs["label"], inputs["comment"]):
    attributes += b"\x00" if optional is None else b"\x01" + sized16(optional.encode())
attributes += b"\x01" + struct.pack(">I", len(inputs["genericData"])) + inputs["genericData"]
attributes += struct.pack(">qq", inputs["creationMilliseconds"], inputs["modificationMilliseconds"])

header = (b"TKIT" + struct.pack(">HH", 1, 104) + store_id + inputs["itemID"] + struct.pack(">Q", inputs["generation"])
          + bytes([inputs["accessibility"], 0, inputs["valueKind"], 0]) + inputs["salt"] + inputs["nonce"]
          + struct.pack(">II", len(attributes), len(inputs["value"])))
assert len(header) == 104
second_nonce = inputs["nonce"][:-1] + bytes([inputs["nonce"][-1] ^ 1])
attributes_section = AESGCM(item_key).encrypt(inputs["nonce"], attributes, header)
secret_aad = header + b"".join(struct.pack(">I", len(f.encode())) + f.encode()
                              for f in (inputs["accessGroup"], inputs["service"], inputs["account"])) + attributes_section
file_bytes = header + attributes_section + AESGCM(item_key).encrypt(second_nonce, inputs["value"], secret_aad)

vector = {
    "about": "Item file v1 computed by Fixtures/make-item-vector.py from docs/FORMAT.md, independently of the Swift code.",
    "inputs": {k: (v.hex() if isinstance(v, bytes) else v) for k, v in inputs.items()},
    "serviceDirectory": name(names_key, "service", inputs["accessGroup"], inputs["service"]),
    "itemFileName": name(names_key, "item", inputs["accessGroup"], inputs["service"], inputs["account"]) + ".item",
    "file": file_bytes.hex(),
}
with open(__file__.replace("make-item-vector.py", "item-v1.json"), "w") as out:
    json.dump(vector, out, indent=2)
    out.write("\n")
print("wrote item-v1.json,", len(file_bytes), "bytes")
