#!/usr/bin/python3
'''Drives the real fprintd (Debian's, with libfprint's virtual_device driver) on a private bus,
for FprintdTests' RealFprintd.

    realctl.py ADDRESS allow-polkit SECONDS     waits for python-dbusmock's polkitd and allows every action
    realctl.py ADDRESS deny-polkit              makes the polkitd mock refuse every action
    realctl.py ADDRESS wait SECONDS             until fprintd answers GetDefaultDevice
    realctl.py ADDRESS enroll SOCKET FINGER ID  claims the reader, enrolls FINGER by touching it with the
                                                virtual finger ID until enroll-completed, releases it
    realctl.py ADDRESS delete                   claims the reader, deletes this user's prints, releases it
    realctl.py ADDRESS touch SOCKET COMMAND SECONDS
                                                waits until the reader needs a finger (its finger-needed
                                                property: a verification is running), then sends COMMAND
                                                ("SCAN <id>", "UNPLUG") to the virtual reader

The virtual reader takes one command per connection and drops a connection whose command it has
not read when a new one arrives, so each touch waits for the driver to close its end.

Exits non-zero, with the reason on stderr, when anything fails.
'''

import socket
import sys
import time

import dbus
import dbus.mainloop.glib
from gi.repository import GLib

NAME = 'net.reactivated.Fprint'
MANAGER = '/net/reactivated/Fprint/Manager'
DEVICE = NAME + '.Device'


def until(predicate, what, seconds):
    deadline = time.monotonic() + float(seconds)
    while time.monotonic() < deadline:
        try:
            result = predicate()
            if result:
                return result
        except dbus.DBusException:
            pass
        time.sleep(0.01)
    sys.exit('timed out after %s s waiting for %s' % (seconds, what))


def send(socket_path, command):
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    connection.settimeout(10)
    connection.connect(socket_path)
    connection.sendall(command.encode())
    while connection.recv(64):
        pass
    connection.close()


def device(bus):
    manager = dbus.Interface(bus.get_object(NAME, MANAGER), NAME + '.Manager')
    path = manager.GetDefaultDevice()
    return bus.get_object(NAME, path)


def main():
    address, command = sys.argv[1], sys.argv[2]
    arguments = sys.argv[3:]
    dbus.mainloop.glib.DBusGMainLoop(set_as_default=True)
    bus = dbus.bus.BusConnection(address)

    if command == 'allow-polkit':
        until(lambda: bus.name_has_owner('org.freedesktop.PolicyKit1'), 'the polkitd mock', arguments[0])
        authority = bus.get_object('org.freedesktop.PolicyKit1', '/org/freedesktop/PolicyKit1/Authority')
        authority.AllowUnknown(True, dbus_interface='org.freedesktop.DBus.Mock')
        return
    if command == 'deny-polkit':
        authority = bus.get_object('org.freedesktop.PolicyKit1', '/org/freedesktop/PolicyKit1/Authority')
        authority.AllowUnknown(False, dbus_interface='org.freedesktop.DBus.Mock')
        authority.SetAllowed(dbus.Array([], signature='s'), dbus_interface='org.freedesktop.DBus.Mock')
        return
    if command == 'wait':
        until(lambda: bus.name_has_owner(NAME) and device(bus), 'fprintd and its reader', arguments[0])
        return

    reader = device(bus)
    methods = dbus.Interface(reader, DEVICE)
    if command == 'touch':
        socket_path, touch, seconds = arguments
        until(lambda: bool(reader.Get(DEVICE, 'finger-needed', dbus_interface=dbus.PROPERTIES_IFACE)),
              'the reader to need a finger', seconds)
        send(socket_path, touch)
        return

    # enroll and delete: one connection holds the claim (fprintd drops it with the connection).
    methods.Claim('')
    try:
        if command == 'delete':
            methods.DeleteEnrolledFingers2()
        elif command == 'enroll':
            socket_path, finger, identity = arguments
            statuses = []
            bus.add_signal_receiver(lambda result, done: statuses.append((str(result), bool(done))),
                                    'EnrollStatus', DEVICE)
            context = GLib.MainContext.default()
            methods.EnrollStart(finger)
            deadline = time.monotonic() + 30
            while True:
                send(socket_path, 'SCAN %s' % identity)
                seen = len(statuses)
                while len(statuses) == seen:
                    if time.monotonic() > deadline:
                        sys.exit('enrolling %s: no status after a touch (%r)' % (finger, statuses))
                    context.iteration(False) or time.sleep(0.005)
                result, done = statuses[-1]
                if done:
                    methods.EnrollStop()
                    if result != 'enroll-completed':
                        sys.exit('enrolling %s ended with %s' % (finger, result))
                    break
        else:
            sys.exit('unknown command %s' % command)
    finally:
        methods.Release()


if __name__ == '__main__':
    main()
