#!/usr/bin/python3
'''Drives the fprintd mock (fprintd_template.py) on a private bus, for FprintdTests.

    mockctl.py ADDRESS wait-bus SECONDS      until the bus accepts connections
    mockctl.py ADDRESS wait SECONDS [PID]    until net.reactivated.Fprint is on the bus; fails at once
                                             when process PID (the mock) has exited
    mockctl.py ADDRESS add-device NAME       prints the device's object path
    mockctl.py ADDRESS remove-device PATH
    mockctl.py ADDRESS set-fingers PATH [FINGER...]
    mockctl.py ADDRESS set-script PATH JSON  JSON: [["verify-match", true, 0], ...] (result, done, delay ms)
    mockctl.py ADDRESS set-error PATH METHOD ERROR_NAME [MESSAGE]
    mockctl.py ADDRESS calls PATH            prints the device's call log as JSON: [["Claim", [""]], ...]

Exits non-zero, with the reason on stderr, when anything fails.
'''

import json
import sys
import time

import dbus

BUS_NAME = 'net.reactivated.Fprint'
MANAGER = '/net/reactivated/Fprint/Manager'
MOCK_IFACE = 'org.freedesktop.DBus.Mock'


def plain(value):
    '''dbus-python values as JSON values.'''
    if isinstance(value, dbus.Boolean):
        return bool(value)
    if isinstance(value, (list, tuple)):
        return [plain(item) for item in value]
    if isinstance(value, dict):
        return {str(key): plain(item) for key, item in value.items()}
    if isinstance(value, (int, float)):
        return value
    return str(value)


def exited(pid):
    '''Whether process pid is gone or a zombie (exited, not yet reaped by its parent).'''
    try:
        with open(f'/proc/{pid}/stat', encoding='ascii') as stat:
            return stat.read().rsplit(')', 1)[1].split()[0] == 'Z'
    except FileNotFoundError:
        return True


def wait(address, seconds, for_service, pid=None):
    deadline = time.monotonic() + seconds
    last = None
    while time.monotonic() < deadline:
        if pid is not None and exited(pid):
            sys.exit(f'the fprintd mock (pid {pid}) exited before it appeared on {address}')
        try:
            bus = dbus.bus.BusConnection(address)
            if not for_service or bus.name_has_owner(BUS_NAME):
                return
            last = f'{BUS_NAME} has no owner yet'
        except dbus.exceptions.DBusException as error:
            last = str(error)
        time.sleep(0.05)
    what = 'the fprintd mock' if for_service else 'the bus'
    sys.exit(f'{what} did not appear on {address} within {seconds} s: {last}')


def main(argv):
    if len(argv) < 3:
        sys.exit(__doc__)
    address, command, args = argv[1], argv[2], argv[3:]
    if command in ('wait', 'wait-bus'):
        wait(address, float(args[0]), for_service=command == 'wait', pid=int(args[1]) if len(args) > 1 else None)
        return
    bus = dbus.bus.BusConnection(address)

    def mock(path=MANAGER):
        return dbus.Interface(bus.get_object(BUS_NAME, path), MOCK_IFACE)

    if command == 'add-device':
        print(mock().AddDevice(args[0]))
    elif command == 'remove-device':
        mock().RemoveDevice(dbus.ObjectPath(args[0]))
    elif command == 'set-fingers':
        mock().SetEnrolledFingers(dbus.ObjectPath(args[0]), dbus.Array(args[1:], signature='s'))
    elif command == 'set-script':
        steps = [dbus.Struct((str(r), dbus.Boolean(d), dbus.UInt32(ms)), signature='sbu') for r, d, ms in json.loads(args[1])]
        mock().SetVerifyScript(dbus.ObjectPath(args[0]), dbus.Array(steps, signature='(sbu)'))
    elif command == 'set-error':
        message = args[3] if len(args) > 3 else 'injected by mockctl'
        mock().SetMethodError(dbus.ObjectPath(args[0]), args[1], args[2], message)
    elif command == 'calls':
        calls = mock(args[0]).GetCalls()
        print(json.dumps([[str(name), plain(arguments)] for _, name, arguments in calls]))
    else:
        sys.exit(f'unknown command {command}\n{__doc__}')


if __name__ == '__main__':
    try:
        main(sys.argv)
    except dbus.exceptions.DBusException as error:
        sys.exit(f'{error.get_dbus_name()}: {error.get_dbus_message()}')
