#!/usr/bin/python3
"""Arguments of the right D-Bus signature but the wrong meaning, and more state than a connection
may hold; prints "ROW: ERROR-NAME" or "ROW: ok" per call, then the collections that exist.

    DBUS_SESSION_BUS_ADDRESS=... /usr/bin/python3 bad_arguments.py
"""
from jeepney import DBusAddress, HeaderFields, MessageType, new_method_call
from jeepney.io.blocking import open_dbus_connection

BUS_NAME = "org.freedesktop.secrets"
SERVICE = "/org/freedesktop/secrets"
SS = "org.freedesktop.Secret."
PROPERTIES = "org.freedesktop.DBus.Properties"
DH = "dh-ietf1024-sha256-aes128-cbc-pkcs7"
PRIME = int(
    "FFFFFFFFFFFFFFFFC90FDAA22168C234C4C6628B80DC1CD129024E088A67CC74020BBEA63B139B22514A08798E3404DD"
    "EF9519B3CD3A431B302B0A6DF25F14374FE1356D6D51C245E485B576625E7EC6F44C42E9A637ED6B0BFF5CB6F406B7ED"
    "EE386BFB5A899FA5AE9F24117C4B1FE649286651ECE65381FFFFFFFFFFFFFFFF", 16)
connection = open_dbus_connection(bus="SESSION")


def call(path, interface, member, signature=None, body=()):
    address = DBusAddress(path, bus_name=BUS_NAME, interface=interface)
    reply = connection.send_and_get_reply(new_method_call(address, member, signature, body))
    if reply.header.message_type == MessageType.error:
        return reply.header.fields[HeaderFields.error_name], None
    return "ok", reply.body


def show(row, answer):
    print(f"{row}: {answer[0]}")


session = call(SERVICE, SS + "Service", "OpenSession", "sv", ("plain", ("s", "")))[1][1]
secret = (session, b"", b"value", "text/plain")
default = SERVICE + "/aliases/default"

show("CreateItem label not a string", call(default, SS + "Collection", "CreateItem", "a{sv}(oayays)b",
                                           ({SS + "Item.Label": ("u", 7)}, secret, False)))
show("CreateItem attributes not a{ss}", call(default, SS + "Collection", "CreateItem", "a{sv}(oayays)b",
                                             ({SS + "Item.Attributes": ("as", ["a"])}, secret, False)))
status, body = call(default, SS + "Collection", "CreateItem", "a{sv}(oayays)b",
                    ({SS + "Item.Label": ("s", "good"), SS + "Item.Attributes": ("a{ss}", {"k": "v"})}, secret,
                     False))
show("CreateItem well formed", (status, body))
item = body[0]
show("Set item Label not a string", call(item, PROPERTIES, "Set", "ssv", (SS + "Item", "Label", ("u", 7))))
show("Set item Attributes not a{ss}", call(item, PROPERTIES, "Set", "ssv", (SS + "Item", "Attributes", ("s", "x"))))
show("Set collection Label not a string",
     call(default, PROPERTIES, "Set", "ssv", (SS + "Collection", "Label", ("b", True))))
show("CreateCollection label not a string",
     call(SERVICE, SS + "Service", "CreateCollection", "a{sv}s", ({SS + "Collection.Label": ("u", 1)}, "")))
show("CreateCollection ConfirmEachAccess not a boolean",
     call(SERVICE, SS + "Service", "CreateCollection", "a{sv}s",
          ({SS + "Collection.Label": ("s", "confirming"),
            "org.tpmkeychain.Collection.ConfirmEachAccess": ("s", "yes")}, "")))
show("GetAll of a collection that does not exist",
     call(SERVICE + "/collection/nothing_here", PROPERTIES, "GetAll", "s", (SS + "Collection",)))
show("GetAll of an item that does not exist", call(default + "/0000", PROPERTIES, "GetAll", "s", (SS + "Item",)))
show("GetAll of a session that does not exist",
     call(SERVICE + "/session/999999", PROPERTIES, "GetAll", "s", (SS + "Session",)))
show("GetAll of a prompt that does not exist",
     call(SERVICE + "/prompt/999999", PROPERTIES, "GetAll", "s", (SS + "Prompt",)))
show("GetAll of this connection's session", call(session, PROPERTIES, "GetAll", "s", (SS + "Session",)))

# Diffie-Hellman public values: 0, 1, p - 1, p and p + 1 are refused, and so is a valid value padded
# past the prime's 128 bytes; 2 and p - 2 are the range's ends.
for name, value in [("0", 0), ("1", 1), ("p-1", PRIME - 1), ("p", PRIME), ("p+1", PRIME + 1), ("2", 2),
                    ("p-2", PRIME - 2)]:
    encoded = value.to_bytes(129 if value > PRIME else 128, "big")
    show(f"DH public {name}", call(SERVICE, SS + "Service", "OpenSession", "sv", (DH, ("ay", encoded))))
show("DH public 2 in 129 bytes",
     call(SERVICE, SS + "Service", "OpenSession", "sv", (DH, ("ay", (2).to_bytes(129, "big")))))

# A connection may hold 64 sessions (the two DH ones above and the plain one count).
answers = [call(SERVICE, SS + "Service", "OpenSession", "sv", ("plain", ("s", "")))[0] for _ in range(70)]
print(f"sessions opened: {answers.count('ok')}, then: {sorted(set(a for a in answers if a != 'ok'))}")

status, body = call(SERVICE, PROPERTIES, "Get", "ss", (SS + "Service", "Collections"))
print("collections:", " ".join(sorted(path.rsplit("/", 1)[1] for path in body[0][1])))
