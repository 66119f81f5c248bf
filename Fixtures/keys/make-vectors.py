#!/usr/bin/env python3
"""Writes Fixtures/keys/vectors.json: known-answer vectors for the SecKey algorithms TPMKeychain
implements (ECDH, ECDH + ANSI X9.63 KDF, Apple's ECIES, ECDSA), computed from the algorithms'
definitions and fixed private keys written below as hex -- a second implementation, independent of
the Swift code. Run: python3 Fixtures/keys/make-vectors.py (needs the `cryptography` package).

Constructions (sources: Apple's Security sources, apple-oss-distributions/Security,
OSX/sec/Security/{SecKeyAdaptors.m, SecECKey.m, SecKey.m}; SEC 1 v2; NIST SP 800-38D)
------------------------------------------------------------------------------------------------
Keys.  Public keys are X9.63 uncompressed points 04 || X || Y, each coordinate padded to the field
size (32 / 48 / 66 bytes); this is SecKeyCopyExternalRepresentation of an EC public key.  The
external representation of an EC private key is 04 || X || Y || K (K padded to the field size).
kSecAttrApplicationLabel ("klbl") is SHA-1 of the X9.63 public key.
  - Apple Security, SecECKey.m: SecECPublicKeyExport / SecECPrivateKeyCopyExternalRepresentation;
    SecKey.m: SecKeyCopyAttributeDictionaryWithLocalKey (klbl = SecSHA1DigestCreate(public bytes)).

ECDH (kSecKeyAlgorithmECDHKeyExchangeStandard, "algid:keyexchange:ECDH", and Cofactor,
"algid:keyexchange:ECDHC").  Output = x-coordinate of d_A * Q_B, padded to the field size
(SEC 1 v2 s3.3.1; Apple SecECKey.m calls ccecdh_compute_shared_secret with a ccec_ccn_size buffer
for both Standard and Cofactor; the NIST prime curves have cofactor 1 so both are the same).

ECDH + X9.63 KDF (kSecKeyAlgorithmECDHKeyExchangeStandardX963SHA256,
"algid:keyexchange:ECDH:KDFX963:SHA256").  Parameters: "requestedSize" (CFNumber, required) and
"sharedInfo" (CFData, optional).  Output = X963KDF_SHA256(Z, sharedInfo, requestedSize), where
(ANSI X9.63 / SEC 1 v2 s3.6.1)  K = Hash(Z || Counter || SharedInfo) for Counter = 00000001,
00000002, ... (32-bit big-endian), concatenated and truncated to requestedSize bytes.
  - Apple SecKeyAdaptors.m: SecKeyECDHCopyX963Result -> ccansikdf_x963(di, Z, sharedInfo, size).

ECIES (kSecKeyAlgorithmECIESEncryptionStandardVariableIVX963SHA256AESGCM,
"algid:encrypt:ECIES:ECDH:KDFX963:SHA256:AESGCM-KDFIV"), Apple SecKeyAdaptors.m
SecKeyECIESCopyEncryptedData / SecKeyECIESKeyExchangeKDFX963CopyResult /
SecKeyECIESEncryptAESGCMCopyResult:
  1. ephemeral key pair (e, E) on the recipient's curve; E as X9.63 (65 / 97 / 133 bytes).
  2. Z = ECDH(e, Q_recipient) (x-coordinate, field-size bytes).
  3. aesKeySize = 16 bytes if the curve is <= 256 bits, else 32 bytes
     (computed as ((len(Q_recipient) - 1) / 2) * 8 > 256 ? 32 : 16).
  4. kdf = X963KDF_SHA256(Z, sharedInfo = E, length = aesKeySize + 16).
  5. key = kdf[:aesKeySize], iv = kdf[aesKeySize:] (16 bytes -- NOT the 12-byte GCM nonce, so
     GCM derives J0 = GHASH(IV || 0^64 || [128]_64), NIST SP 800-38D s7.1 step 2).
  6. AES-GCM with no additional authenticated data (AAD length 0, NULL) and a 16-byte tag.
  7. output = E || ciphertext || tag.
The legacy kSecKeyAlgorithmECIESEncryptionStandardX963SHA256AESGCM
("algid:encrypt:ECIES:ECDH:KDFX963:SHA256:AESGCM") is the same with length = aesKeySize and an
all-zero 16-byte IV.  The Cofactor variants ("ECDHC") give identical bytes on these curves.
Note: Apple's SecKey.h prose for the legacy (non-VariableIV) ECIES constants says "static public key
data is used as authenticationData for AES-GCM", but the implementation passes AAD = (0, NULL);
interoperable third-party implementations (e.g. BC-ECIES-for-iOS) also use no AAD.  These vectors
follow the implementation.  (Newer Security releases add an optional "aad" parameter through
SecKeyCreateEncryptedDataWithParameters; absent by default.)

ECDSA (kSecKeyAlgorithmECDSASignatureMessageX962SHA256, "algid:sign:ECDSA:message-X962:SHA256"):
SHA-256 of the message, then X9.62 ECDSA; the signature is DER SEQUENCE { r INTEGER, s INTEGER }.
The vector is key + message; the signature below uses a FIXED nonce k (for reproducibility only --
never do this outside a test vector) and is checked with `cryptography`'s verifier.

AES-GCM is computed twice: with `cryptography`'s AESGCM and with a from-the-text implementation of
NIST SP 800-38D (GHASH / GCTR over AES-ECB) below; the X9.63 KDF likewise against `cryptography`'s
X963KDF; EC scalar multiplication likewise against `cryptography`'s key derivation.
"""
import hashlib, json, os, struct
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature, decode_dss_signature
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.x963kdf import X963KDF

# ---------------------------------------------------------------------------------------------
# Curves (SEC 2 v2 / FIPS 186-4 D.1.2): y^2 = x^3 - 3x + b over GF(p), base point G, order n.
CURVES = {
    "P-256": dict(
        size=32, crypto=ec.SECP256R1(),
        p=0xffffffff00000001000000000000000000000000ffffffffffffffffffffffff,
        b=0x5ac635d8aa3a93e7b3ebbd55769886bc651d06b0cc53b0f63bce3c3e27d2604b,
        gx=0x6b17d1f2e12c4247f8bce6e563a440f277037d812deb33a0f4a13945d898c296,
        gy=0x4fe342e2fe1a7f9b8ee7eb4a7c0f9e162bce33576b315ececbb6406837bf51f5,
        n=0xffffffff00000000ffffffffffffffffbce6faada7179e84f3b9cac2fc632551),
    "P-384": dict(
        size=48, crypto=ec.SECP384R1(),
        p=int("fffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffe"
              "ffffffff0000000000000000ffffffff", 16),
        b=int("b3312fa7e23ee7e4988e056be3f82d19181d9c6efe8141120314088f5013875a"
              "c656398d8a2ed19d2a85c8edd3ec2aef", 16),
        gx=int("aa87ca22be8b05378eb1c71ef320ad746e1d3b628ba79b9859f741e082542a38"
               "5502f25dbf55296c3a545e3872760ab7", 16),
        gy=int("3617de4a96262c6f5d9e98bf9292dc29f8f41dbd289a147ce9da3113b5f0b8c0"
               "0a60b1ce1d7e819d7a431d7c90ea0e5f", 16),
        n=int("ffffffffffffffffffffffffffffffffffffffffffffffffc7634d81f4372ddf"
              "581a0db248b0a77aecec196accc52973", 16)),
    "P-521": dict(
        size=66, crypto=ec.SECP521R1(),
        p=2**521 - 1,
        b=int("0051953eb9618e1c9a1f929a21a0b68540eea2da725b99b315f3b8b489918ef1"
              "09e156193951ec7e937b1652c0bd3bb1bf073573df883d2c34f1ef451fd46b50"
              "3f00", 16),
        gx=int("00c6858e06b70404e9cd9e3ecb662395b4429c648139053fb521f828af606b4d"
               "3dbaa14b5e77efe75928fe1dc127a2ffa8de3348b3c1856a429bf97e7e31c2e5"
               "bd66", 16),
        gy=int("011839296a789a3bc0045c8a5fb42c7d1bd998f54449579b446817afbd17273e"
               "662c97ee72995ef42640c550b9013fad0761353c7086a272c24088be94769fd1"
               "6650", 16),
        n=int("01ffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff"
              "fffa51868783bf2f966b7fcc0148f709a5d03bb5c9b8899c47aebb6fb71e9138"
              "6409", 16)),
}

def ec_add(c, P, Q):
    """Affine point addition (None is the point at infinity), a = -3."""
    p = c["p"]
    if P is None: return Q
    if Q is None: return P
    (x1, y1), (x2, y2) = P, Q
    if x1 == x2 and (y1 + y2) % p == 0: return None
    if P == Q: lam = (3 * x1 * x1 - 3) * pow(2 * y1, -1, p) % p
    else:      lam = (y2 - y1) * pow(x2 - x1, -1, p) % p
    x3 = (lam * lam - x1 - x2) % p
    return (x3, (lam * (x1 - x3) - y1) % p)

def ec_mul(c, k, P):
    R = None
    for bit in bin(k)[2:]:
        R = ec_add(c, R, R)
        if bit == "1": R = ec_add(c, R, P)
    return R

def on_curve(c, P):
    x, y = P
    return (y * y - (x ** 3 - 3 * x + c["b"])) % c["p"] == 0

def be(value, size): return value.to_bytes(size, "big")

def x963(c, P): return b"\x04" + be(P[0], c["size"]) + be(P[1], c["size"])

def keypair(curve, scalar_hex):
    """Our own arithmetic, checked against cryptography's key derivation."""
    c = CURVES[curve]
    d = int(scalar_hex, 16)
    assert 0 < d < c["n"], (curve, scalar_hex)
    Q = ec_mul(c, d, (c["gx"], c["gy"]))
    assert on_curve(c, Q)
    ref = ec.derive_private_key(d, c["crypto"])
    ref_pub = ref.public_key().public_bytes(serialization.Encoding.X962,
                                            serialization.PublicFormat.UncompressedPoint)
    assert ref_pub == x963(c, Q), curve
    return d, Q, ref

def ecdh(curve, d, Q_peer, ref_private, ref_peer_public):
    c = CURVES[curve]
    z = be(ec_mul(c, d, Q_peer)[0], c["size"])          # SEC 1 s3.3.1: x-coordinate, field size
    assert z == ref_private.exchange(ec.ECDH(), ref_peer_public)
    return z

# ---------------------------------------------------------------------------------------------
# ANSI X9.63 KDF (SEC 1 v2 s3.6.1): Hash(Z || counter_be32 || SharedInfo), counter from 1.
def x963_kdf(z, shared_info, length, hash_name="sha256"):
    out, counter = b"", 1
    while len(out) < length:
        out += hashlib.new(hash_name, z + struct.pack(">I", counter) + shared_info).digest()
        counter += 1
    out = out[:length]
    ref = X963KDF(algorithm={"sha256": hashes.SHA256()}[hash_name], length=length,
                  sharedinfo=shared_info or None).derive(z)
    assert out == ref
    return out

# ---------------------------------------------------------------------------------------------
# AES-GCM per NIST SP 800-38D, over the AES block function.
R = 0xE1 << 120

def gf_mult(X, Y):                       # SP 800-38D s6.3, Algorithm 1
    Z, V = 0, Y
    for i in range(127, -1, -1):
        if (X >> i) & 1: Z ^= V
        V = (V >> 1) ^ R if V & 1 else V >> 1
    return Z

def ghash(H, data):                      # s6.4; data is a multiple of 16 bytes
    Y = 0
    for i in range(0, len(data), 16):
        Y = gf_mult(Y ^ int.from_bytes(data[i:i + 16], "big"), H)
    return Y

def pad16(data): return data + b"\x00" * (-len(data) % 16)

def gcm_encrypt(key, iv, plaintext, aad=b"", tag_len=16):
    aes = Cipher(algorithms.AES(key), modes.ECB()).encryptor()
    E = lambda block: aes.update(block)
    H = int.from_bytes(E(b"\x00" * 16), "big")
    if len(iv) == 12:                    # s7.1 step 2
        J0 = iv + b"\x00\x00\x00\x01"
    else:
        J0 = be(ghash(H, pad16(iv) + b"\x00" * 8 + struct.pack(">Q", len(iv) * 8)), 16)
    def inc32(block):
        return block[:12] + struct.pack(">I", (struct.unpack(">I", block[12:])[0] + 1) & 0xffffffff)
    def gctr(icb, data):                 # s6.5
        out, cb = b"", icb
        for i in range(0, len(data), 16):
            chunk = data[i:i + 16]
            out += bytes(a ^ b for a, b in zip(chunk, E(cb)))
            cb = inc32(cb)
        return out
    C = gctr(inc32(J0), plaintext)
    S = ghash(H, pad16(aad) + pad16(C) + struct.pack(">QQ", len(aad) * 8, len(C) * 8))
    T = gctr(J0, be(S, 16))[:tag_len]
    ref = AESGCM(key).encrypt(iv, plaintext, aad or None)
    assert ref == C + T
    assert AESGCM(key).decrypt(iv, C + T, aad or None) == plaintext
    return C, T

# ---------------------------------------------------------------------------------------------
# Fixed keys (random once, written here; never use them for anything real).
P256_RECIPIENT = "744165edf28bf176eda5db120428c9495b41daf91f422dcb9ec4b421577867cc"
P256_EPHEMERAL = "5c2231d34743a1b577c90d3cceb1b34b6691a204ed4065eb6de416c6921d8d7f"
P256_ALICE     = "d59da4e3ec270bbec33a14fed0fd7db81d2c0a5ab8a797405a8f8e30f9af492b"
P256_BOB       = "e1e891b17a6e0bee5692f688cda473184503c77606466aac6604f52f68730dd1"
# With Bob, this one gives a shared secret whose first byte is 00 (checks left padding).
P256_PADDED    = "750ce464ae98409666bf0eb5ada777a57c81647f853f4b5a84aeb2a3ee307e61"
P256_SIGNER    = "eae51d48cbc224102704d44bf5a7f4419d78f3a1adf4f72d9fe84f91950be785"
P256_SIGN_K    = "11f9552a496ee0b6ed2c31004daef1ffa82fe9bf9313ae3c96fe4b8f18e2cacc"
P384_RECIPIENT = ("881c578798caf8fc671cbf644fb44bdb305d2da19cdb1fb7"
                  "09fc58105a927b5a5f5543cb6410887508f781475ceba130")
P384_EPHEMERAL = ("3e13cc2b29b35c26a3a26f1ee3ade88666ff4de559c5f0e6"
                  "53b1a968ae6fe9376fe0d2c47ff21af92cc52b959d2b6230")
P521_RECIPIENT = ("01beda9241021f61b5db3819b027f11c07dac825d93353d04f862b35964c0d7f"
                  "b8e05e4eb82c0c75919465afe55e6c735b449d17d735a8372e53f2e2f5551a24153f")
P521_EPHEMERAL = ("001640fa167de104b50d997912b53ea1c0ac67045eb67f35c60575d4f3c7f33e"
                  "24e5abfba35507a9085f535d1ab5c5cebf62156a99d790df28524234ccdd24fdd428")

PLAINTEXT = b"TPMKeychain ECIES known answer"
X963_SHARED_INFO = b"TPMKeychain X9.63 sharedInfo"
MESSAGE = b"TPMKeychain ECDSA known answer"

ALG = {
    "ecdh": "algid:keyexchange:ECDH",
    "ecdhCofactor": "algid:keyexchange:ECDHC",
    "ecdhX963SHA256": "algid:keyexchange:ECDH:KDFX963:SHA256",
    "ecdhCofactorX963SHA256": "algid:keyexchange:ECDHC:KDFX963:SHA256",
    "eciesVariableIV": "algid:encrypt:ECIES:ECDH:KDFX963:SHA256:AESGCM-KDFIV",
    "eciesCofactorVariableIV": "algid:encrypt:ECIES:ECDHC:KDFX963:SHA256:AESGCM-KDFIV",
    "eciesLegacy": "algid:encrypt:ECIES:ECDH:KDFX963:SHA256:AESGCM",
    "ecdsaMessageSHA256": "algid:sign:ECDSA:message-X962:SHA256",
    "ecdsaDigestSHA256": "algid:sign:ECDSA:digest-X962:SHA256",
}

def key_entry(curve, scalar_hex):
    c = CURVES[curve]
    d, Q, _ = keypair(curve, scalar_hex)
    pub = x963(c, Q)
    return {
        "private": be(d, c["size"]).hex(),
        "public": pub.hex(),
        "privateExternalRepresentation": (pub + be(d, c["size"])).hex(),
        "applicationLabel": hashlib.sha1(pub).hexdigest(),
    }

def ecdh_entry(curve, a_hex, b_hex):
    c = CURVES[curve]
    da, Qa, refa = keypair(curve, a_hex)
    db, Qb, refb = keypair(curve, b_hex)
    z_ab = ecdh(curve, da, Qb, refa, refb.public_key())
    z_ba = ecdh(curve, db, Qa, refb, refa.public_key())
    assert z_ab == z_ba
    return {"curve": curve, "algorithm": ALG["ecdh"], "cofactorAlgorithm": ALG["ecdhCofactor"],
            "a": key_entry(curve, a_hex), "b": key_entry(curve, b_hex), "sharedSecret": z_ab.hex()}

def ecies_entry(curve, recipient_hex, ephemeral_hex, variable_iv=True):
    c = CURVES[curve]
    dr, Qr, refr = keypair(curve, recipient_hex)
    de, Qe, refe = keypair(curve, ephemeral_hex)
    recipient_pub, ephemeral_pub = x963(c, Qr), x963(c, Qe)
    z = ecdh(curve, de, Qr, refe, refr.public_key())
    assert z == ecdh(curve, dr, Qe, refr, refe.public_key())          # the decrypting side
    aes_key_size = 32 if ((len(recipient_pub) - 1) // 2) * 8 > 256 else 16
    kdf = x963_kdf(z, ephemeral_pub, aes_key_size + (16 if variable_iv else 0))
    key = kdf[:aes_key_size]
    iv = kdf[aes_key_size:] if variable_iv else b"\x00" * 16
    ct, tag = gcm_encrypt(key, iv, PLAINTEXT)
    blob = ephemeral_pub + ct + tag
    # Parse the blob the way SecKeyECIESCopyDecryptedData does and decrypt it again.
    e_len = 2 * c["size"] + 1
    assert AESGCM(key).decrypt(iv, blob[e_len:], None) == PLAINTEXT and blob[:e_len] == ephemeral_pub
    return {
        "curve": curve,
        "algorithm": ALG["eciesVariableIV"] if variable_iv else ALG["eciesLegacy"],
        "cofactorAlgorithm": (ALG["eciesCofactorVariableIV"] if variable_iv
                              else "algid:encrypt:ECIES:ECDHC:KDFX963:SHA256:AESGCM"),
        "variableIV": variable_iv,
        "recipientPrivate": be(dr, c["size"]).hex(),
        "recipientPublic": recipient_pub.hex(),
        "ephemeralPrivate": be(de, c["size"]).hex(),
        "ephemeralPublic": ephemeral_pub.hex(),
        "plaintext": PLAINTEXT.hex(),
        "sharedSecret": z.hex(),
        "sharedInfo": ephemeral_pub.hex(),
        "kdfOutput": kdf.hex(),
        "key": key.hex(),
        "iv": iv.hex(),
        "aad": "",
        "encrypted": ct.hex(),
        "tag": tag.hex(),
        "ciphertext": blob.hex(),
    }

def ecdsa_entry():
    curve = "P-256"; c = CURVES[curve]
    d, Q, ref = keypair(curve, P256_SIGNER)
    digest = hashlib.sha256(MESSAGE).digest()
    e = int.from_bytes(digest, "big")                 # 256-bit hash on a 256-bit curve: no shift
    k = int(P256_SIGN_K, 16)
    r = ec_mul(c, k, (c["gx"], c["gy"]))[0] % c["n"]
    s = pow(k, -1, c["n"]) * (e + r * d) % c["n"]
    assert r and s
    der = encode_dss_signature(r, s)
    ref.public_key().verify(der, MESSAGE, ec.ECDSA(hashes.SHA256()))   # raises if wrong
    assert decode_dss_signature(der) == (r, s)
    entry = key_entry(curve, P256_SIGNER)
    return {"curve": curve, "algorithm": ALG["ecdsaMessageSHA256"],
            "digestAlgorithm": ALG["ecdsaDigestSHA256"],
            "private": entry["private"], "public": entry["public"],
            "applicationLabel": entry["applicationLabel"],
            "message": MESSAGE.hex(), "digest": digest.hex(),
            "nonce": be(k, c["size"]).hex(),
            "signatureDER": der.hex(), "signatureRaw": (be(r, 32) + be(s, 32)).hex()}

def main():
    ecdh_vec = ecdh_entry("P-256", P256_ALICE, P256_BOB)
    padded = ecdh_entry("P-256", P256_PADDED, P256_BOB)
    assert padded["sharedSecret"].startswith("00")
    z = bytes.fromhex(ecdh_vec["sharedSecret"])
    ecdh_x963 = {
        "curve": "P-256", "algorithm": ALG["ecdhX963SHA256"],
        "cofactorAlgorithm": ALG["ecdhCofactorX963SHA256"],
        "a": ecdh_vec["a"], "b": ecdh_vec["b"], "sharedSecret": ecdh_vec["sharedSecret"],
        "requestedSize": 32, "sharedInfo": X963_SHARED_INFO.hex(),
        "output": x963_kdf(z, X963_SHARED_INFO, 32).hex(),
        "outputWithoutSharedInfo": x963_kdf(z, b"", 32).hex(),
    }
    kdf_vectors = [
        {"hash": "SHA256", "z": z.hex(), "sharedInfo": si.hex(), "length": n,
         "output": x963_kdf(z, si, n).hex()}
        for si, n in [(b"", 16), (X963_SHARED_INFO, 32), (X963_SHARED_INFO, 80), (b"", 100)]
    ]
    ecies = [
        ecies_entry("P-256", P256_RECIPIENT, P256_EPHEMERAL),
        ecies_entry("P-384", P384_RECIPIENT, P384_EPHEMERAL),
        ecies_entry("P-521", P521_RECIPIENT, P521_EPHEMERAL),
        ecies_entry("P-256", P256_RECIPIENT, P256_EPHEMERAL, variable_iv=False),
    ]
    out = {
        "comment": "Generated by Fixtures/keys/make-vectors.py; every byte string is lowercase hex.",
        "ecdh": ecdh_vec,
        "ecdhPadded": padded,
        "ecdhX963": ecdh_x963,
        "x963kdf": kdf_vectors,
        "ecies": ecies,
        "ecdsa": ecdsa_entry(),
    }
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "vectors.json")
    with open(path, "w") as f:
        json.dump(out, f, indent=2)
        f.write("\n")
    print("wrote", path)

if __name__ == "__main__":
    main()
