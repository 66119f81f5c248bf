#!/usr/bin/python3
"""libsecret's own C library (through GObject introspection, as GNOME's apps link it) against the
Secret Service on DBUS_SESSION_BUS_ADDRESS. Prints "ok SCENARIO" when every step held.

    crash   what Seahorse and GNOME Online Accounts do: load the default collection with its items,
            create an item on it (Secret.Item.create_sync), then store a password asynchronously.
            A provider whose PropertiesChanged names the collection's Items as invalidated makes
            libsecret read a property it no longer has: the process dies of SIGSEGV here.
    watch   a client holding the default collection (items loaded) learns of an item another
            process (secret-tool) stores, and of its deletion, without asking again.

    DBUS_SESSION_BUS_ADDRESS=... /usr/bin/python3 libsecret_client.py crash|watch
"""
import subprocess
import sys
import time

import gi

gi.require_version("Secret", "1")
from gi.repository import GLib, Secret  # noqa: E402

SCHEMA = Secret.Schema.new(
    "org.tpmkeychain.Test", Secret.SchemaFlags.NONE,
    {"service": Secret.SchemaAttributeType.STRING, "account": Secret.SchemaAttributeType.STRING})

# A bound for a hung provider, not a measure of speed: each wait ends as soon as what it waits
# for is seen.
LIMIT_SECONDS = 60


def default_collection():
    service = Secret.Service.get_sync(
        Secret.ServiceFlags.OPEN_SESSION | Secret.ServiceFlags.LOAD_COLLECTIONS, None)
    collection = Secret.Collection.for_alias_sync(
        service, Secret.COLLECTION_DEFAULT, Secret.CollectionFlags.LOAD_ITEMS, None)
    if collection is None:
        sys.exit("no default collection")
    return collection


def run_until(condition, what):
    """Iterates the main loop (where libsecret handles the bus's signals) until condition holds."""
    context = GLib.MainContext.default()
    deadline = time.monotonic() + LIMIT_SECONDS
    while not condition():
        if time.monotonic() > deadline:
            sys.exit(f"not within {LIMIT_SECONDS} s: {what}")
        context.iteration(False) or time.sleep(0.01)


def labels(collection):
    return sorted(item.get_label() for item in collection.get_items())


def crash():
    collection = default_collection()
    created = Secret.Item.create_sync(
        collection, SCHEMA, {"service": "crash.example", "account": "first"}, "first item",
        Secret.Value.new("first secret", -1, "text/plain"), Secret.ItemCreateFlags.NONE, None)
    if created is None:
        sys.exit("create_sync returned nothing")
    outcome = {}

    def stored(_source, result):
        try:
            outcome["stored"] = Secret.password_store_finish(result)
        except GLib.Error as error:
            outcome["error"] = error.message

    Secret.password_store(
        SCHEMA, {"service": "crash.example", "account": "second"}, Secret.COLLECTION_DEFAULT, "second item",
        "second secret", None, stored)
    run_until(lambda: outcome, "the asynchronous password_store finishes")
    if "error" in outcome or not outcome.get("stored"):
        sys.exit(f"password_store failed: {outcome}")
    found = Secret.password_lookup_sync(SCHEMA, {"service": "crash.example", "account": "second"}, None)
    if found != "second secret":
        sys.exit(f"lookup after the store: {found!r}")
    run_until(lambda: "second item" in labels(collection), "the collection lists the second item")
    print("ok crash")


def watch():
    collection = default_collection()
    before = labels(collection)
    if "from another app" in before:
        sys.exit(f"the item exists before it is stored: {before}")
    subprocess.run(
        ["/usr/bin/secret-tool", "store", "--label", "from another app", "service", "watch.example",
         "account", "other"], input=b"stored elsewhere", check=True)
    run_until(lambda: "from another app" in labels(collection), "the watching client sees the new item")
    subprocess.run(
        ["/usr/bin/secret-tool", "clear", "service", "watch.example", "account", "other"], check=True)
    run_until(lambda: "from another app" not in labels(collection), "the watching client sees the deletion")
    print("ok watch")


if __name__ == "__main__":
    {"crash": crash, "watch": watch}[sys.argv[1]]()
