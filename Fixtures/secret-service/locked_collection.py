#!/usr/bin/python3
"""Drives a collection whose unlock asks for the device passcode (org.tpmkeychain.Collection.
AccessControl), one step per run, printing one result line per step:

    locked_collection.py create LABEL [CONTROL]  -> "created PATH locked=True" (CONTROL: devicePasscode)
    locked_collection.py unlock PATH             -> "unlock dismissed=BOOL locked=BOOL"
    locked_collection.py store PATH ACCOUNT SECRET -> "stored" or "error NAME"
    locked_collection.py read PATH ACCOUNT       -> "secret VALUE" or "error NAME"
    locked_collection.py lock PATH               -> "locked=BOOL"
    locked_collection.py state PATH              -> "locked=BOOL"
    locked_collection.py vanish PATH             -> starts Prompt() and exits without waiting

The passcode comes from the daemon's --passcode-command, which the test points at a file.
"""
import sys

import secretstorage
from jeepney import DBusAddress, new_method_call
from secretstorage.exceptions import LockedException

SERVICE = DBusAddress('/org/freedesktop/secrets', bus_name='org.freedesktop.secrets',
                      interface='org.freedesktop.Secret.Service')


def error_name(reply):
    return reply.header.fields.get(4) if reply.header.message_type.name == 'error' else None


connection = secretstorage.dbus_init()
step = sys.argv[1]
if step == 'create':
    properties = {'org.freedesktop.Secret.Collection.Label': ('s', sys.argv[2]),
                  'org.tpmkeychain.Collection.AccessControl': ('s', sys.argv[3] if len(sys.argv) > 3 else 'devicePasscode')}
    reply = connection.send_and_get_reply(new_method_call(SERVICE, 'CreateCollection', 'a{sv}s', (properties, '')))
    if error_name(reply):
        print('error', error_name(reply), reply.body)
        sys.exit(0)
    path, prompt = reply.body
    print('created', path, 'locked=%s' % secretstorage.Collection(connection, path).is_locked())
elif step == 'unlock':
    collection = secretstorage.Collection(connection, sys.argv[2])
    dismissed = collection.unlock()
    print('unlock dismissed=%s locked=%s' % (dismissed, collection.is_locked()))
elif step == 'store':
    collection = secretstorage.Collection(connection, sys.argv[2])
    try:
        collection.create_item('locked ' + sys.argv[3], {'service': 'vault', 'account': sys.argv[3]},
                               sys.argv[4].encode(), replace=True)
        print('stored')
    except LockedException:
        print('error locked')
elif step == 'read':
    collection = secretstorage.Collection(connection, sys.argv[2])
    items = list(collection.search_items({'service': 'vault', 'account': sys.argv[3]}))
    if not items:
        print('error missing')
        sys.exit(0)
    session = secretstorage.util.open_session(connection)
    item = DBusAddress(items[0].item_path, bus_name='org.freedesktop.secrets',
                       interface='org.freedesktop.Secret.Item')
    reply = connection.send_and_get_reply(new_method_call(item, 'GetSecret', 'o', (session.object_path,)))
    if error_name(reply):
        print('error', error_name(reply))
    else:
        print('secret', bytes(secretstorage.Item(connection, items[0].item_path, session).get_secret()).decode())
elif step == 'lock':
    collection = secretstorage.Collection(connection, sys.argv[2])
    collection.lock()
    print('locked=%s' % collection.is_locked())
elif step == 'state':
    print('locked=%s' % secretstorage.Collection(connection, sys.argv[2]).is_locked())
elif step == 'vanish':
    reply = connection.send_and_get_reply(new_method_call(SERVICE, 'Unlock', 'ao', ([sys.argv[2]],)))
    unlocked, prompt = reply.body
    address = DBusAddress(prompt, bus_name='org.freedesktop.secrets', interface='org.freedesktop.Secret.Prompt')
    connection.send(new_method_call(address, 'Prompt', 's', ('',)))
    print('vanished', prompt)
