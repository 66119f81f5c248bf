"""python-fido2 over the passkey authenticator's socket, with py_webauthn as the relying party.

Usage: fido_client.py SOCKET MODE [ARGS]. The socket carries CTAPHID reports, 64 bytes each way,
as a HID device node does; this wraps it in fido2's CtapHidConnection and drives fido2's own
client (Fido2Client) and CTAP2 classes. A /dev/hidraw path instead of a socket is opened as fido2
opens any security key, through the kernel (the UHID device). Each mode prints one JSON object on
its last line.
"""

import json
import socket
import sys

from fido2.client import DefaultClientDataCollector, Fido2Client, UserInteraction
from fido2.ctap2 import Ctap2, ClientPin, CredentialManagement
from fido2.ctap import CtapError
from fido2.hid import CtapHidDevice, open_device
from fido2.hid.base import CtapHidConnection, HidDescriptor
from fido2.webauthn import (
    PublicKeyCredentialCreationOptions,
    PublicKeyCredentialRequestOptions,
)
import webauthn
from webauthn.helpers import options_to_json
from webauthn.helpers.structs import (
    AuthenticatorSelectionCriteria,
    ResidentKeyRequirement,
    UserVerificationRequirement,
)

RP_ID = "example.com"
ORIGIN = "https://example.com"


class SocketConnection(CtapHidConnection):
    def __init__(self, path):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(path)

    def read_packet(self):
        data = b""
        while len(data) < 64:
            chunk = self.sock.recv(64 - len(data))
            if not chunk:
                raise OSError("the authenticator hung up")
            data += chunk
        return data

    def write_packet(self, data):
        self.sock.sendall(data.ljust(64, b"\0"))

    def close(self):
        self.sock.close()


def device(path):
    if path.startswith("/dev/hidraw"):
        return open_device(path)
    descriptor = HidDescriptor(path, 0, 0, 64, 64, "tpm-keychain-passkeys", None)
    return CtapHidDevice(descriptor, SocketConnection(path))


class PinInteraction(UserInteraction):
    def __init__(self, pin):
        self.pin = pin

    def prompt_up(self):
        pass

    def request_pin(self, permissions, rp_id):
        return self.pin

    def request_uv(self, permissions, rp_id):
        return True


def client(path, pin):
    return Fido2Client(device(path), DefaultClientDataCollector(ORIGIN), PinInteraction(pin))


def register(path, count, pin, resident):
    fido = client(path, pin)
    registered = []
    for i in range(count):
        uv = UserVerificationRequirement.REQUIRED if pin else UserVerificationRequirement.DISCOURAGED
        options = webauthn.generate_registration_options(
            rp_id=RP_ID,
            rp_name="Example",
            user_name=f"user{i}@example.com",
            user_id=f"user-{i}".encode(),
            user_display_name=f"User {i}",
            authenticator_selection=AuthenticatorSelectionCriteria(
                resident_key=ResidentKeyRequirement.REQUIRED if resident else ResidentKeyRequirement.DISCOURAGED,
                user_verification=uv,
            ),
        )
        request = PublicKeyCredentialCreationOptions.from_dict(json.loads(options_to_json(options)))
        response = fido.make_credential(request)
        verified = webauthn.verify_registration_response(
            credential=dict(response),
            expected_challenge=options.challenge,
            expected_origin=ORIGIN,
            expected_rp_id=RP_ID,
            require_user_verification=bool(pin),
        )
        registered.append(
            {
                "id": verified.credential_id.hex(),
                "public_key": verified.credential_public_key.hex(),
                "sign_count": verified.sign_count,
                "user": f"user-{i}",
                "fmt": verified.fmt,
                "uv": verified.user_verified,
            }
        )
    return registered


def assert_all(path, registered, pin, rounds, discoverable):
    fido = client(path, pin)
    counts = {entry["id"]: entry["sign_count"] for entry in registered}
    results = []
    for _ in range(rounds):
        for entry in registered:
            allow = [] if discoverable else [{"id": bytes.fromhex(entry["id"]), "type": "public-key"}]
            options = webauthn.generate_authentication_options(
                rp_id=RP_ID,
                allow_credentials=[
                    webauthn.helpers.structs.PublicKeyCredentialDescriptor(id=bytes.fromhex(entry["id"]))
                ]
                if not discoverable
                else [],
                user_verification=UserVerificationRequirement.REQUIRED if pin else UserVerificationRequirement.DISCOURAGED,
            )
            request = PublicKeyCredentialRequestOptions.from_dict(json.loads(options_to_json(options)))
            selection = fido.get_assertion(request)
            responses = selection.get_assertions()
            chosen = None
            for index in range(len(responses)):
                response = selection.get_response(index)
                if response.raw_id.hex() == entry["id"]:
                    chosen = response
            if chosen is None:
                raise SystemExit(f"no assertion for {entry['id']}: got {[r.credential['id'].hex() for r in responses]}")
            verified = webauthn.verify_authentication_response(
                credential=dict(chosen),
                expected_challenge=options.challenge,
                expected_origin=ORIGIN,
                expected_rp_id=RP_ID,
                credential_public_key=bytes.fromhex(entry["public_key"]),
                credential_current_sign_count=counts[entry["id"]],
                require_user_verification=bool(pin),
            )
            if verified.new_sign_count <= counts[entry["id"]]:
                raise SystemExit("the sign count did not increase")
            counts[entry["id"]] = verified.new_sign_count
            results.append({"id": entry["id"], "sign_count": verified.new_sign_count,
                            "user_handle": chosen.response.user_handle.decode() if chosen.response.user_handle else None})
    return results


def main():
    path, mode = sys.argv[1], sys.argv[2]
    if mode == "info":
        info = Ctap2(device(path)).get_info()
        print(json.dumps({"versions": info.versions, "options": info.options, "aaguid": str(info.aaguid),
                          "extensions": info.extensions, "pin_protocols": info.pin_uv_protocols}))
    elif mode == "register-and-assert":
        count, pin = int(sys.argv[3]), (sys.argv[4] if len(sys.argv) > 4 and sys.argv[4] else None)
        registered = register(path, count, pin, resident=True)
        asserted = assert_all(path, registered, pin, rounds=1, discoverable=False)
        discovered = assert_all(path, registered[:2], pin, rounds=1, discoverable=True)
        if len(sys.argv) > 5:
            # Kept for assert-again: each credential with the highest count seen.
            latest = {entry["id"]: entry["sign_count"] for entry in asserted + discovered}
            with open(sys.argv[5], "w") as kept:
                json.dump([dict(entry, sign_count=max(entry["sign_count"], latest.get(entry["id"], 0)))
                           for entry in registered], kept)
        print(json.dumps({"registered": registered, "asserted": asserted, "discovered": discovered}))
    elif mode == "assert-again":
        with open(sys.argv[3]) as kept:
            registered = json.load(kept)
        asserted = assert_all(path, registered, None, rounds=1, discoverable=False)
        print(json.dumps({"asserted": asserted}))
    elif mode == "set-pin":
        ClientPin(Ctap2(device(path))).set_pin(sys.argv[3])
        print(json.dumps({"set": True}))
    elif mode == "wrong-pins":
        ctap = Ctap2(device(path))
        errors = []
        for _ in range(int(sys.argv[3])):
            try:
                ClientPin(ctap).get_pin_token(sys.argv[4])
                errors.append("ok")
            except CtapError as error:
                errors.append(error.code.name)
        retries = ClientPin(ctap).get_pin_retries()[0]
        print(json.dumps({"errors": errors, "retries": retries}))
    elif mode == "manage":
        ctap = Ctap2(device(path))
        pin = ClientPin(ctap)
        token = pin.get_pin_token(sys.argv[3], ClientPin.PERMISSION.CREDENTIAL_MGMT)
        manager = CredentialManagement(ctap, pin.protocol, token)
        metadata = manager.get_metadata()
        rps = manager.enumerate_rps()
        listed = []
        for rp in rps:
            for credential in manager.enumerate_creds(rp[CredentialManagement.RESULT.RP_ID_HASH]):
                listed.append(credential[CredentialManagement.RESULT.CREDENTIAL_ID]["id"].hex())
        deleted = None
        if len(sys.argv) > 4 and sys.argv[4] == "rename-first" and listed:
            rp_hash = rps[0][CredentialManagement.RESULT.RP_ID_HASH]
            first = manager.enumerate_creds(rp_hash)[0]
            user = first[CredentialManagement.RESULT.USER]
            manager.update_user_info({"id": bytes.fromhex(listed[0]), "type": "public-key"},
                                     {"id": user["id"], "name": "renamed@example.com", "displayName": "Renamed"})
            after = manager.enumerate_creds(rp_hash)[0][CredentialManagement.RESULT.USER]
            print(json.dumps({"renamed": after.get("name"), "display": after.get("displayName")}))
            return
        if len(sys.argv) > 4 and sys.argv[4] == "delete-first" and listed:
            manager.delete_cred({"id": bytes.fromhex(listed[0]), "type": "public-key"})
            deleted = listed[0]
        print(json.dumps({"existing": metadata[CredentialManagement.RESULT.EXISTING_CRED_COUNT],
                          "rps": [rp[CredentialManagement.RESULT.RP]["id"] for rp in rps],
                          "credentials": listed, "deleted": deleted}))
    elif mode == "prf":
        # WebAuthn's PRF, which python-fido2 carries over CTAP2's hmac-secret.
        import os
        fido = client(path, sys.argv[3])
        options = PublicKeyCredentialCreationOptions.from_dict({
            "rp": {"id": RP_ID, "name": "Example"},
            "user": {"id": "cHJm", "name": "prf@example.com", "displayName": "PRF"},
            "challenge": "Y2hhbGxlbmdl",
            "pubKeyCredParams": [{"type": "public-key", "alg": -7}],
            "authenticatorSelection": {"residentKey": "required", "userVerification": "required"},
            "extensions": {"prf": {}},
        })
        made = fido.make_credential(options)
        enabled = made.client_extension_results.get("prf", {}).get("enabled")
        credential_id = made.raw_id

        def evaluate(salt):
            request = PublicKeyCredentialRequestOptions.from_dict({
                "challenge": "Y2hhbGxlbmdl", "rpId": RP_ID, "userVerification": "required",
                "allowCredentials": [{"type": "public-key", "id": websafe(credential_id)}],
                "extensions": {"prf": {"eval": {"first": websafe(salt)}}},
            })
            response = fido.get_assertion(request).get_response(0)
            return response.client_extension_results["prf"]["results"]["first"]

        def websafe(data):
            import base64
            return base64.urlsafe_b64encode(data).rstrip(b"=").decode()

        salt_a, salt_b = os.urandom(32), os.urandom(32)
        first, again, other = evaluate(salt_a), evaluate(salt_a), evaluate(salt_b)
        print(json.dumps({"enabled": enabled, "same": first == again, "different": first != other,
                          "length": len(first) if isinstance(first, (bytes, str)) else None}))
    elif mode == "uv-register":
        # CTAP2 itself, to choose the options: "uv" asks for built-in user verification.
        import os
        ctap = Ctap2(device(path))
        options = {"rk": True}
        if sys.argv[3] == "uv":
            options["uv"] = True
        try:
            attestation = ctap.make_credential(
                os.urandom(32), {"id": RP_ID, "name": "Example"},
                {"id": os.urandom(8), "name": sys.argv[4], "displayName": sys.argv[4]},
                [{"type": "public-key", "alg": -7}], options=options)
        except CtapError as error:
            print(json.dumps({"error": error.code.name}))
            return
        data = attestation.auth_data
        with open(sys.argv[5], "w") as kept:
            json.dump({"id": data.credential_data.credential_id.hex(),
                       "key": {str(k): (v.hex() if isinstance(v, bytes) else v)
                               for k, v in data.credential_data.public_key.items()}}, kept)
        print(json.dumps({"uv": bool(data.flags & 0x04)}))
    elif mode == "uv-assert":
        import os
        from fido2.cose import CoseKey
        with open(sys.argv[3]) as kept:
            credential = json.load(kept)
        key = CoseKey.parse({int(k): (bytes.fromhex(v) if isinstance(v, str) else v)
                             for k, v in credential["key"].items()})
        ctap = Ctap2(device(path))
        challenge = os.urandom(32)
        try:
            response = ctap.get_assertion(
                RP_ID, challenge, [{"type": "public-key", "id": bytes.fromhex(credential["id"])}])
        except CtapError as error:
            print(json.dumps({"error": error.code.name}))
            return
        key.verify(bytes(response.auth_data) + challenge, response.signature)
        print(json.dumps({"signed": True, "uv": bool(response.auth_data.flags & 0x04)}))
    elif mode == "discover":
        import os
        try:
            response = Ctap2(device(path)).get_assertion(RP_ID, os.urandom(32))
        except CtapError as error:
            print(json.dumps({"error": error.code.name}))
            return
        print(json.dumps({"credentials": response.number_of_credentials or 1}))
    elif mode == "reset":
        Ctap2(device(path)).reset()
        print(json.dumps({"reset": True}))
    else:
        raise SystemExit("unknown mode " + mode)


if __name__ == "__main__":
    main()
