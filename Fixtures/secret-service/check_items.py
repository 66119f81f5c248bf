#!/usr/bin/python3
"""Reads the given accounts' items (service crash-test) and prints "missing ACCOUNT" or
"wrong ACCOUNT" for each that is not there with its secret, then "checked N".

    DBUS_SESSION_BUS_ADDRESS=... /usr/bin/python3 check_items.py ACCOUNT...
"""
import sys

import secretstorage

connection = secretstorage.dbus_init()
collection = secretstorage.get_default_collection(connection)
for account in sys.argv[1:]:
    items = list(collection.search_items({"service": "crash-test", "account": account}))
    if not items:
        print(f"missing {account}")
    elif items[0].get_secret() != f"secret of {account}".encode():
        print(f"wrong {account}")
print(f"checked {len(sys.argv) - 1}")
