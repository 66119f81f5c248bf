#!/usr/bin/python3
"""Creates items in the default collection one after another, printing "acked ACCOUNT" (flushed)
after each CreateItem reply, until killed or COUNT items exist. The crash test kills the daemon
while this runs and then checks that every acknowledged item is still there.

    DBUS_SESSION_BUS_ADDRESS=... /usr/bin/python3 create_items.py PREFIX COUNT
"""
import sys

import secretstorage

prefix, count = sys.argv[1], int(sys.argv[2])
connection = secretstorage.dbus_init()
collection = secretstorage.get_default_collection(connection)
for number in range(count):
    account = f"{prefix}-{number}"
    try:
        collection.create_item(f"crash {account}", {"service": "crash-test", "account": account},
                               f"secret of {account}".encode(), replace=True)
    except Exception as error:  # the daemon died: stop quietly
        print(f"stopped {error.__class__.__name__}", flush=True)
        sys.exit(0)
    print(f"acked {account}", flush=True)
