#!/usr/bin/python3
"""Sends malformed and hostile method calls to every object and member of a Secret Service:
wrong signatures, wrong types, huge and empty values, bad object paths, unknown members, random
bodies. Every call must get a reply (a return or an error), never silence; prints the count of
error replies and "alive" when the service still answers a normal call at the end.

    DBUS_SESSION_BUS_ADDRESS=... /usr/bin/python3 hostile_messages.py SEED ROUNDS
"""
import random
import sys

from jeepney import DBusAddress, new_method_call
from jeepney.io.blocking import open_dbus_connection

seed, rounds = int(sys.argv[1]), int(sys.argv[2])
rng = random.Random(seed)
connection = open_dbus_connection(bus="SESSION")
service = "org.freedesktop.secrets"
base = "/org/freedesktop/secrets"
paths = [base, base + "/collection/default", base + "/collection/session", base + "/aliases/default",
         base + "/collection/default/00", base + "/collection/nope/00", base + "/session/1", base + "/prompt/1",
         base + "/collection", base + "/aliases", base + "/collection/default/" + "a" * 300, "/"]
members = {
    "org.freedesktop.Secret.Service": ["OpenSession", "CreateCollection", "SearchItems", "Unlock", "Lock",
                                       "GetSecrets", "ReadAlias", "SetAlias", "Nope"],
    "org.freedesktop.Secret.Collection": ["Delete", "SearchItems", "CreateItem", "Nope"],
    "org.freedesktop.Secret.Item": ["Delete", "GetSecret", "SetSecret"],
    "org.freedesktop.Secret.Session": ["Close"],
    "org.freedesktop.Secret.Prompt": ["Prompt", "Dismiss"],
    "org.freedesktop.DBus.Properties": ["Get", "GetAll", "Set"],
    "org.freedesktop.DBus.Introspectable": ["Introspect"],
    "": ["OpenSession", "GetSecret", "Get"],
    "org.example.Nope": ["Nope"],
}


def value(signature):
    if signature == "s":
        return rng.choice(["", "plain", "dh-ietf1024-sha256-aes128-cbc-pkcs7", "default", "x" * 70000,
                           "org.freedesktop.Secret.Item.Label", "Label", "\u00e9\u4e2d"])
    if signature == "o":
        return rng.choice(paths[:-2] + ["/"])
    if signature == "b":
        return rng.choice([True, False])
    if signature == "u":
        return rng.randrange(2 ** 32)
    if signature == "ay":
        return bytes(rng.randrange(256) for _ in range(rng.choice([0, 1, 16, 127, 128, 129, 4096])))
    if signature == "ao":
        return [value("o") for _ in range(rng.randrange(4))]
    if signature == "a{ss}":
        return {value("s")[:20]: value("s")[:50] for _ in range(rng.randrange(4))}
    if signature == "a{sv}":
        return {rng.choice(["org.freedesktop.Secret.Item.Label", "org.freedesktop.Secret.Item.Attributes",
                            "org.freedesktop.Secret.Collection.Label", "x",
                            "org.tpmkeychain.Collection.AccessControl",
                            "org.tpmkeychain.Collection.AllowedExecutables",
                            "org.tpmkeychain.Collection.ConfirmEachAccess"]):
                rng.choice([("s", "label"), ("a{ss}", {"a": "b"}), ("u", 7), ("ay", b"\x00"),
                            ("s", "devicePasscode"), ("s", "biometryCurrentSet,or"), ("s", "bogus,,"),
                            ("as", ["/usr/bin/x", "/usr/bin/x"]), ("as", []), ("as", ["relative"]), ("b", True)])
                for _ in range(rng.randrange(3))}
    if signature == "v":
        return rng.choice([("s", ""), ("ay", value("ay")), ("u", 1), ("as", ["a"])])
    if signature == "(oayays)":
        return (value("o"), value("ay"), value("ay"), value("s")[:30])
    raise ValueError(signature)


signatures = ["", "s", "o", "b", "u", "ay", "ao", "a{ss}", "a{sv}", "v", "(oayays)", "sv", "ss", "ssv", "so",
              "aoo", "a{sv}s", "a{sv}(oayays)b", "ou", "sss"]
own_signatures = {"OpenSession": "sv", "CreateCollection": "a{sv}s", "SearchItems": "a{ss}", "Unlock": "ao",
                  "Lock": "ao", "GetSecrets": "aoo", "ReadAlias": "s", "SetAlias": "so", "CreateItem": "a{sv}(oayays)b",
                  "GetSecret": "o", "SetSecret": "(oayays)", "Get": "ss", "GetAll": "s", "Set": "ssv", "Prompt": "s",
                  "Delete": "", "Close": "", "Dismiss": "", "Introspect": ""}
errors = 0
for _ in range(rounds):
    interface = rng.choice(list(members))
    member = rng.choice(members[interface])
    # Half the calls carry the member's own signature, so that the handlers past the signature
    # check see hostile values too; the other half any signature.
    signature = rng.choice(signatures)
    if member in own_signatures and rng.random() < 0.5:
        signature = own_signatures[member]
    arguments = []
    parts = {"sv": ["s", "v"], "ss": ["s", "s"], "ssv": ["s", "s", "v"], "so": ["s", "o"], "aoo": ["ao", "o"],
             "a{sv}s": ["a{sv}", "s"], "a{sv}(oayays)b": ["a{sv}", "(oayays)", "b"], "ou": ["o", "u"],
             "sss": ["s", "s", "s"]}.get(signature, [signature] if signature else [])
    arguments = tuple(value(part) for part in parts)
    address = DBusAddress(rng.choice(paths), bus_name=service, interface=interface or None)
    message = new_method_call(address, member, signature or None, arguments)
    reply = connection.send_and_get_reply(message, timeout=30)
    if reply.header.message_type.name == "error":
        errors += 1

check = new_method_call(DBusAddress(base, bus_name=service, interface="org.freedesktop.DBus.Properties"),
                        "GetAll", "s", ("org.freedesktop.Secret.Service",))
reply = connection.send_and_get_reply(check, timeout=30)
print(f"errors {errors} of {rounds}")
print("alive" if reply.header.message_type.name == "method_return" else "dead")
