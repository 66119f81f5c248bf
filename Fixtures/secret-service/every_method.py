#!/usr/bin/python3
"""Calls every method of every interface the Secret Service declares (read from its own
Introspect, so that a method added without a row here fails the run) against one collection and
one of its items, as a caller the collection must refuse, and prints one line per call:
"ROW ERROR-NAME" or "ROW ok". The test compares the lines with what the specification expects.

    refused   the caller's executable is not among the collection's AllowedExecutables
    locked    the collection is locked (Lock), and the caller is allowed

    DBUS_SESSION_BUS_ADDRESS=... /usr/bin/python3 every_method.py refused|locked COLLECTION ITEM OTHER

COLLECTION is the collection's path, ITEM an item in it, OTHER another collection (an alias's
other end). "default" must name COLLECTION when this runs.
"""
import sys
import xml.etree.ElementTree as ET

from jeepney import DBusAddress, HeaderFields, MessageType, new_method_call
from jeepney.io.blocking import open_dbus_connection

mode, collection, item, other = sys.argv[1:5]
BUS_NAME = "org.freedesktop.secrets"
SERVICE = "/org/freedesktop/secrets"
SS = "org.freedesktop.Secret."
PROPERTIES = "org.freedesktop.DBus.Properties"
connection = open_dbus_connection(bus="SESSION")


def call(path, interface, member, signature=None, body=()):
    address = DBusAddress(path, bus_name=BUS_NAME, interface=interface)
    reply = connection.send_and_get_reply(new_method_call(address, member, signature, body))
    if reply.header.message_type == MessageType.error:
        raise CallError(reply.header.fields[HeaderFields.error_name])
    return reply.body


class CallError(Exception):
    pass


session = call(SERVICE, SS + "Service", "OpenSession", "sv", ("plain", ("s", "")))[1]
secret = (session, b"", b"replaced by the refused caller", "text/plain")
item_alias = "/org/freedesktop/secrets/aliases/default/" + item.rsplit("/", 1)[1]

# (row, interface, member, path, signature, body): every method, each way it can touch COLLECTION.
rows = [
    ("item GetSecret", SS + "Item", "GetSecret", item, "o", (session,)),
    ("item GetSecret by alias", SS + "Item", "GetSecret", item_alias, "o", (session,)),
    ("item SetSecret", SS + "Item", "SetSecret", item, "(oayays)", (secret,)),
    ("item Delete", SS + "Item", "Delete", item, "", ()),
    ("item Set Label", PROPERTIES, "Set", item, "ssv", (SS + "Item", "Label", ("s", "renamed"))),
    ("item Set Attributes", PROPERTIES, "Set", item, "ssv",
     (SS + "Item", "Attributes", ("a{ss}", {"service": "hijacked"}))),
    ("item Get Label", PROPERTIES, "Get", item, "ss", (SS + "Item", "Label")),
    ("item GetAll", PROPERTIES, "GetAll", item, "s", (SS + "Item",)),
    ("item Introspect", "org.freedesktop.DBus.Introspectable", "Introspect", item, "", ()),
    ("collection CreateItem", SS + "Collection", "CreateItem", collection, "a{sv}(oayays)b",
     ({SS + "Item.Label": ("s", "planted"), SS + "Item.Attributes": ("a{ss}", {"planted": "yes"})}, secret,
      False)),
    ("collection SearchItems", SS + "Collection", "SearchItems", collection, "a{ss}", ({},)),
    ("collection Delete", SS + "Collection", "Delete", collection, "", ()),
    ("collection Set Label", PROPERTIES, "Set", collection, "ssv", (SS + "Collection", "Label", ("s", "renamed"))),
    ("collection GetAll", PROPERTIES, "GetAll", collection, "s", (SS + "Collection",)),
    ("service SearchItems", SS + "Service", "SearchItems", SERVICE, "a{ss}", ({},)),
    ("service GetSecrets", SS + "Service", "GetSecrets", SERVICE, "aoo", ([item], session)),
    ("service Lock", SS + "Service", "Lock", SERVICE, "ao", ([collection],)),
    ("service Unlock", SS + "Service", "Unlock", SERVICE, "ao", ([collection],)),
    ("service ReadAlias", SS + "Service", "ReadAlias", SERVICE, "s", ("default",)),
    ("service SetAlias default away", SS + "Service", "SetAlias", SERVICE, "so", ("default", other)),
    ("service SetAlias default to none", SS + "Service", "SetAlias", SERVICE, "so", ("default", "/")),
    ("service SetAlias new to it", SS + "Service", "SetAlias", SERVICE, "so", ("mine", collection)),
    ("service OpenSession", SS + "Service", "OpenSession", SERVICE, "sv", ("plain", ("s", ""))),
    ("service CreateCollection", SS + "Service", "CreateCollection", SERVICE, "a{sv}s",
     ({SS + "Collection.Label": ("s", "the caller's own")}, "")),
    ("session Close", SS + "Session", "Close", session, "", ()),
]
# Methods that touch no collection (sessions, prompts, introspection of the service) are listed so
# that the check below knows them; the rows above call them where they could.
no_collection = {(SS + "Prompt", "Prompt"), (SS + "Prompt", "Dismiss"), (PROPERTIES, "GetAll"), (PROPERTIES, "Get"),
                 ("org.freedesktop.DBus.Peer", "Ping"), ("org.freedesktop.DBus.Peer", "GetMachineId")}

declared = set()
for path in (SERVICE, collection, item, session):
    xml = call(path, "org.freedesktop.DBus.Introspectable", "Introspect")[0]
    for interface in ET.fromstring(xml).findall("interface"):
        for method in interface.findall("method"):
            declared.add((interface.get("name"), method.get("name")))
covered = {(row[1], row[2]) for row in rows} | no_collection
missing = sorted(declared - covered)
if missing:
    sys.exit(f"methods without a row: {missing}")

# In "locked" mode the Unlock row would end the test's premise; it is the way out, not a breach.
for row, interface, member, path, signature, body in rows:
    if mode == "locked" and row == "service Unlock":
        continue
    try:
        reply = call(path, interface, member, signature, body)
        # GetSecrets leaves out what the caller may not read: an empty answer is a refusal too.
        detail = " empty" if member == "GetSecrets" and not reply[0] else ""
        print(f"{row}: ok{detail}")
    except CallError as error:
        print(f"{row}: {error.args[0]}")
