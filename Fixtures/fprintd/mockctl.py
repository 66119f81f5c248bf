#!/usr/bin/python3
'''Drives the fprintd mock (fprintd_template.py) on a private bus, for FprintdTests.

    mockctl.py ADDRESS wait-bus SECONDS      until the bus accepts connections
    mockctl.py ADDRESS wait SECONDS [PID]    until net.reactivated.Fprint is on the bus (owned by PID); fails at once
                                             when process PID (the mock) has exited
    mockctl.py ADDRESS add-device NAME       prints the device's object path
    mockctl.py ADDRESS remove-device PATH
    mockctl.py ADDRESS set-fingers PATH [FINGER...]
    mockctl.py ADDRESS set-script PATH JSON  JSON: [["verify-match", true, 0], ...] (result, done, delay ms)
    mockctl.py ADDRESS set-error PATH METHOD ERROR_NAME [MESSAGE]
    mockctl.py ADDRESS calls PATH            prints the device's call log as JSON: [["Claim", [""]], ...]
    mockctl.py ADDRESS emit PATH RESULT DONE the mock (fprintd's owner) broadcasts VerifyStatus(RESULT, DONE)
    mockctl.py ADDRESS forge PATH RESULT DONE another connection, owning nothing, sends VerifyStatus(RESULT,
                                             DONE) as fprintd's path and interface: unicast to every other
                                             connection on the bus, and broadcast; returns once the bus has
                                             routed all of them

Exits non-zero, with the reason on stderr, when anything fails.
'''

import json
import sys
import time

import dbus
import dbus.lowlevel

BUS_NAME = 'net.reactivated.Fprint'
MANAGER = '/net/reactivated/Fprint/Manager'
MOCK_IFACE = 'org.freedesktop.DBus.Mock'
DEVICE_IFACE = 'net.reactivated.Fprint.Device'


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


def owner_pid(bus):
    driver = dbus.Interface(bus.get_object('org.freedesktop.DBus', '/org/freedesktop/DBus'), 'org.freedesktop.DBus')
    return int(driver.GetConnectionUnixProcessID(BUS_NAME))


def wait(address, seconds, for_service, pid=None):
    deadline = time.monotonic() + seconds
    last = None
    while time.monotonic() < deadline:
        if pid is not None and exited(pid):
            sys.exit(f'the fprintd mock (pid {pid}) exited before it appeared on {address}')
        try:
            bus = dbus.bus.BusConnection(address)
            if not for_service or (bus.name_has_owner(BUS_NAME) and (pid is None or owner_pid(bus) == pid)):
                return
            last = f'{BUS_NAME} has no owner yet' if pid is None else f'{BUS_NAME} is not owned by process {pid} yet'
        except dbus.exceptions.DBusException as error:
            last = str(error)
        time.sleep(0.05)
    what = 'the fprintd mock' if for_service else 'the bus'
    sys.exit(f'{what} did not appear on {address} within {seconds} s: {last}')


def forge(bus, path, result, done):
    '''What any local user can send on a bus whose policy allows signals (the system bus's default).'''
    owner = bus.get_name_owner(BUS_NAME)
    driver = dbus.Interface(bus.get_object('org.freedesktop.DBus', '/org/freedesktop/DBus'), 'org.freedesktop.DBus')
    targets = [name for name in driver.ListNames() if name.startswith(':') and name not in (owner, bus.get_unique_name())]
    for target in targets + [None]:
        signal = dbus.lowlevel.SignalMessage(path, DEVICE_IFACE, 'VerifyStatus')
        signal.append(result, dbus.Boolean(done), signature='sb')
        if target is not None:
            signal.set_destination(target)
        bus.send_message(signal)
    # The bus handles one connection's messages in order: once it answers this call, every
    # signal above has been routed.
    driver.GetId()


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
    elif command == 'emit':
        mock(args[0]).EmitSignal(DEVICE_IFACE, 'VerifyStatus', 'sb', [args[1], dbus.Boolean(args[2] == 'true')])
    elif command == 'forge':
        forge(bus, args[0], args[1], args[2] == 'true')
    else:
        sys.exit(f'unknown command {command}\n{__doc__}')


if __name__ == '__main__':
    try:
        main(sys.argv)
    except dbus.exceptions.DBusException as error:
        sys.exit(f'{error.get_dbus_name()}: {error.get_dbus_message()}')
