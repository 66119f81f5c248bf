#!/usr/bin/python3
"""python3-keyring (jaraco keyring) SecretService backend against a Secret Service provider.

    DBUS_SESSION_BUS_ADDRESS=... /usr/bin/python3 keyring_client.py

Uses keyring.backends.SecretService.Keyring() explicitly (no backend auto-selection), which goes
through python3-secretstorage: get_default_collection (aliases/default, CreateCollection("default")
if missing), is_locked/unlock, CreateItem(replace=True) with attributes
{service, username, application="Python keyring library"} and label "Password for 'U' on 'S'",
Collection.SearchItems {service, username}, GetSecret over a DH session, Item.Delete.
Prints "ok" on success; exits non-zero with a message otherwise.

Validated against gnome-keyring-daemon 42.1 (Debian 12) on a private bus: passes.
"""

import os
import sys
import uuid
from contextlib import closing

import keyring.backends.SecretService as ks
from keyring.errors import PasswordDeleteError


def fail(msg):
    print(f'FAIL keyring: {msg}', file=sys.stderr)
    sys.exit(1)


def check_eq(actual, expected, what):
    if actual != expected:
        fail(f'{what}: expected {expected!r}, got {actual!r}')


def main():
    if 'DBUS_SESSION_BUS_ADDRESS' not in os.environ:
        sys.exit('DBUS_SESSION_BUS_ADDRESS is not set')
    kr = ks.Keyring()
    try:
        prio = ks.Keyring.priority   # checks the service is reachable (NameHasOwner / activatable)
    except RuntimeError as e:
        fail(f'backend not usable: {e}')
    check_eq(prio, 5, 'SecretService backend priority')

    service = f'tpmkeychain-test-{uuid.uuid4().hex[:8]}'
    user = 'alice@example.org'
    password = 'pässwörd ✓ 123'
    try:
        check_eq(kr.get_password(service, user), None, 'get_password before set')
        kr.set_password(service, user, password)
        check_eq(kr.get_password(service, user), password, 'get_password after set')

        # what got stored, seen through secretstorage
        import secretstorage
        with closing(secretstorage.dbus_init()) as conn:
            items = list(secretstorage.search_items(conn, {'service': service}))
            check_eq(len(items), 1, 'items stored for the service')
            attrs = items[0].get_attributes()
            attrs.pop('xdg:schema', None)   # gnome-keyring adds org.freedesktop.Secret.Generic
            check_eq(attrs, {'service': service, 'username': user, 'application': 'Python keyring library'},
                     'stored attributes')
            check_eq(items[0].get_label(), f"Password for '{user}' on '{service}'", 'stored label')

        # set again: replace=True keeps one item
        kr.set_password(service, user, password + '-2')
        check_eq(kr.get_password(service, user), password + '-2', 'get_password after overwrite')
        with closing(secretstorage.dbus_init()) as conn:
            check_eq(len(list(secretstorage.search_items(conn, {'service': service}))), 1,
                     'item count after overwrite (replace=True)')

        kr.set_password(service, 'bob', 'other')
        cred = kr.get_credential(service, user)
        if cred is None:
            fail('get_credential(service, user) returned None')
        check_eq((cred.username, cred.password), (user, password + '-2'), 'get_credential(service, user)')
        cred = kr.get_credential(service, None)   # first match for the service, any user
        if cred is None:
            fail('get_credential(service, None) returned None')
        check_eq(cred.username in (user, 'bob'), True, f'get_credential(service, None) username {cred.username!r}')
        check_eq(cred.password, {user: password + '-2', 'bob': 'other'}[cred.username],
                 'get_credential(service, None) password')
        check_eq(kr.get_credential(service, 'nobody'), None, 'get_credential for an unknown user')

        kr.delete_password(service, user)
        check_eq(kr.get_password(service, user), None, 'get_password after delete')
        check_eq(kr.get_password(service, 'bob'), 'other', 'other user survives the delete')
        try:
            kr.delete_password(service, user)
            fail('second delete_password did not raise PasswordDeleteError')
        except PasswordDeleteError:
            pass
    finally:
        for u in (user, 'bob'):
            try:
                kr.delete_password(service, u)
            except PasswordDeleteError:
                pass
    print('ok keyring')


if __name__ == '__main__':
    main()
