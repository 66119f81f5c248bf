#!/bin/bash
# Runs inside the UHID test VM (run-in-vm.sh), as root in the host's root file system: a store on
# a private swtpm, the passkey authenticator as a HID device through /dev/uhid, and real clients
# through the kernel's hidraw: libfido2's tools list the device and read its getInfo;
# python-fido2 registers and asserts, py_webauthn verifying each answer; libfido2's fido2-assert
# takes an assertion and verifies it against the credential's public key. Each step prints its
# exit status ("list 0"). /run/out/vars names BIN (the directory of tpm-keychain and
# tpm-keychain-passkeys), PYTHON (the venv with python-fido2 and py_webauthn) and FIXTURES
# (Fixtures/passkeys).
set -u
. /run/out/vars
out=/run/out
work=/run/work
mkdir -p "$work/swtpm" && chmod 700 "$work"
export HOME=$work XDG_STATE_HOME=$work/state XDG_DATA_HOME=$work/data
export TPM_KEYCHAIN_TCTI=swtpm:host=127.0.0.1,port=2321
swtpm socket --tpm2 --server type=tcp,port=2321,bindaddr=127.0.0.1 --ctrl type=tcp,port=2322,bindaddr=127.0.0.1 \
    --tpmstate dir="$work/swtpm" --flags not-need-init,startup-clear &
for _ in $(seq 100); do (echo > /dev/tcp/127.0.0.1/2321) 2>/dev/null && break; sleep 0.1; done

"$BIN/tpm-keychain" create-keychain "$work/store" || { echo "create-keychain failed"; exit 10; }
ls /sys/class/hidraw > "$out/hidraw-before" 2>/dev/null
"$BIN/tpm-keychain-passkeys" --keychain "$work/store" --socket "$work/passkeys.socket" \
    --presence-command true --uhid > "$out/server.out" 2> "$out/server.err" &
device=
for _ in $(seq 300); do
    for node in /sys/class/hidraw/hidraw*; do
        [ -e "$node" ] && grep -qx "${node##*/}" "$out/hidraw-before" 2>/dev/null && continue
        [ -e "$node" ] && device=/dev/${node##*/}
    done
    [ -n "$device" ] && [ -e "$device" ] && break
    sleep 0.1
done
[ -n "$device" ] || { echo "no hidraw device appeared"; exit 11; }
echo "$device" > "$out/device"
cat "/sys/class/hidraw/${device##*/}/device/uevent" > "$out/uevent" 2>&1
fido2-token -L > "$out/list" 2>&1; echo "list $?"
fido2-token -I "$device" > "$out/info" 2>&1; echo "info $?"
# python-fido2 through the kernel, py_webauthn checking each answer: registrations and assertions.
"$PYTHON" "$FIXTURES/fido_client.py" "$device" register-and-assert 3 "" "$out/kept.json" > "$out/python" 2>&1
echo "python $?"
# libfido2's own assertion with the first credential, verified against its public key.
cd "$work"
"$PYTHON" - "$out/kept.json" > cred.pem <<'PYTHON'
import json, sys
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from fido2.cose import CoseKey
from fido2 import cbor
entry = json.load(open(sys.argv[1]))[0]
key = CoseKey.parse(cbor.decode(bytes.fromhex(entry["public_key"])))
numbers = ec.EllipticCurvePublicNumbers(int.from_bytes(key[-2], "big"), int.from_bytes(key[-3], "big"), ec.SECP256R1())
sys.stdout.write(numbers.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo).decode())
PYTHON
credential=$("$PYTHON" -c 'import json,sys,base64; print(base64.b64encode(bytes.fromhex(json.load(open(sys.argv[1]))[0]["id"])).decode())' "$out/kept.json")
{ head -c 32 /dev/urandom | base64; echo example.com; echo "$credential"; } > assert.in
fido2-assert -G -i assert.in -o assert.out "$device" > "$out/assert.err" 2>&1; echo "libfido2-assert $?"
fido2-assert -V -i assert.out cred.pem es256 > "$out/verify-assert.err" 2>&1; echo "libfido2-verify $?"
exit 0
