#!/usr/bin/python3
'''Drives the logind mock (logind_template.py) on a private bus, for LogindSessionLockTests.

    mockctl.py ADDRESS wait SECONDS PID            until org.freedesktop.login1 is on the bus; fails
                                                   at once when process PID (the mock) has exited
    mockctl.py ADDRESS add-session ID UID USER     an active session on seat0; prints its object path
    mockctl.py ADDRESS set-locked-hint ID true|false
                                                   Session.SetLockedHint, as a screen locker calls it
    mockctl.py ADDRESS lock ID                     Session.Lock: logind's Lock signal
    mockctl.py ADDRESS unlock ID                   Session.Unlock: logind's Unlock signal
    mockctl.py ADDRESS set-pid-session PID ID      what GetSessionByPID(PID) answers
    mockctl.py ADDRESS set-display UID ID          the user's display session ("" for none)
    mockctl.py ADDRESS remove-session ID           removes it; emits SessionRemoved
    mockctl.py ADDRESS prepare-for-sleep true|false emits Manager.PrepareForSleep, as before a suspend (true)
                                                   and after the wake (false)
    mockctl.py ADDRESS connections PID             prints how many connections process PID has on the bus
    mockctl.py ADDRESS inhibitors                  prints each inhibitor held, WHAT:WHO:MODE, one a line
    mockctl.py ADDRESS forge-unlock ID PID         another connection, owning nothing, sends what would
                                                   unlock session ID (PropertiesChanged LockedHint false,
                                                   Unlock) unicast to each connection of process PID,
                                                   then pings each: once it answers, it has handled them

Exits non-zero, with the reason on stderr, when anything fails.
'''

import sys
import time

import dbus
import dbus.lowlevel

BUS_NAME = 'org.freedesktop.login1'
MANAGER = '/org/freedesktop/login1'
MANAGER_IFACE = 'org.freedesktop.login1.Manager'
SESSION_IFACE = 'org.freedesktop.login1.Session'
MOCK_IFACE = 'org.freedesktop.DBus.Mock'


def exited(pid):
    '''Whether process pid is gone or a zombie (exited, not yet reaped by its parent).'''
    try:
        with open(f'/proc/{pid}/stat', encoding='ascii') as stat:
            return stat.read().rsplit(')', 1)[1].split()[0] == 'Z'
    except FileNotFoundError:
        return True


def wait(address, seconds, pid):
    deadline = time.monotonic() + seconds
    last = None
    while time.monotonic() < deadline:
        if exited(pid):
            sys.exit(f'the logind mock (pid {pid}) exited before it appeared on {address}')
        try:
            bus = dbus.bus.BusConnection(address)
            if bus.name_has_owner(BUS_NAME):
                return
            last = f'{BUS_NAME} has no owner yet'
        except dbus.exceptions.DBusException as error:
            last = str(error)
        time.sleep(0.05)
    sys.exit(f'the logind mock did not appear on {address} within {seconds} s: {last}')


def connection_names(bus, pid):
    '''The unique names of process pid's connections.'''
    driver = dbus.Interface(bus.get_object('org.freedesktop.DBus', '/org/freedesktop/DBus'), 'org.freedesktop.DBus')
    names = []
    for name in driver.ListNames():
        if not name.startswith(':'):
            continue
        try:
            if driver.GetConnectionUnixProcessID(name) == pid:
                names.append(name)
        except dbus.exceptions.DBusException:
            pass  # disconnected meanwhile
    return names


def connections(bus, pid):
    return len(connection_names(bus, pid))


def forge_unlock(bus, session_path, pid):
    '''What any local user can send on a bus whose policy allows signals (the system bus's default).'''
    targets = [name for name in connection_names(bus, pid)]
    for target in targets:
        changed = dbus.lowlevel.SignalMessage(session_path, 'org.freedesktop.DBus.Properties', 'PropertiesChanged')
        changed.append(SESSION_IFACE, dbus.Dictionary({'LockedHint': dbus.Boolean(False, variant_level=1)}, signature='sv'),
                       dbus.Array([], signature='s'), signature='sa{sv}as')
        unlock = dbus.lowlevel.SignalMessage(session_path, SESSION_IFACE, 'Unlock')
        for signal in (changed, unlock):
            signal.set_destination(target)
            bus.send_message(signal)
    # sd-bus answers Peer.Ping in the same loop that dispatches signals, in order: the answer
    # comes after the forged signals were handled.
    for target in targets:
        bus.call_blocking(target, '/', 'org.freedesktop.DBus.Peer', 'Ping', '', [])
    if not targets:
        sys.exit(f'process {pid} has no connection on the bus')


def main(argv):
    if len(argv) < 3:
        sys.exit(__doc__)
    address, command, args = argv[1], argv[2], argv[3:]
    if command == 'wait':
        wait(address, float(args[0]), int(args[1]))
        return
    bus = dbus.bus.BusConnection(address)
    mock = dbus.Interface(bus.get_object(BUS_NAME, MANAGER), MOCK_IFACE)
    manager = dbus.Interface(bus.get_object(BUS_NAME, MANAGER), MANAGER_IFACE)

    def session(session_id):
        return dbus.Interface(bus.get_object(BUS_NAME, manager.GetSession(session_id)), SESSION_IFACE)

    if command == 'add-session':
        print(mock.AddSession(args[0], 'seat0', dbus.UInt32(int(args[1])), args[2], True))
    elif command == 'set-locked-hint':
        session(args[0]).SetLockedHint(dbus.Boolean(args[1] == 'true'))
    elif command == 'lock':
        session(args[0]).Lock()
    elif command == 'unlock':
        session(args[0]).Unlock()
    elif command == 'set-pid-session':
        mock.SetSessionForPID(dbus.UInt32(int(args[0])), args[1])
    elif command == 'set-display':
        mock.SetDisplay(dbus.UInt32(int(args[0])), args[1])
    elif command == 'remove-session':
        mock.RemoveSession(args[0])
    elif command == 'forge-unlock':
        forge_unlock(bus, manager.GetSession(args[0]), int(args[1]))
    elif command == 'prepare-for-sleep':
        mock.EmitSignal(MANAGER_IFACE, 'PrepareForSleep', 'b', [dbus.Boolean(args[0] == 'true')])
    elif command == 'inhibitors':
        for what, who, why, mode, _uid, _pid in manager.ListInhibitors():
            print(f'{what}:{who}:{mode}')
    elif command == 'connections':
        print(connections(bus, int(args[0])))
    else:
        sys.exit(f'unknown command {command}\n{__doc__}')


if __name__ == '__main__':
    try:
        main(sys.argv)
    except dbus.exceptions.DBusException as error:
        sys.exit(f'{error.get_dbus_name()}: {error.get_dbus_message()}')
