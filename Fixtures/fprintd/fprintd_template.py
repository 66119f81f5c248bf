'''fprintd mock template for python-dbusmock (Debian 12: python3-dbusmock 0.28)

Mocks the part of fprintd's interface (src/manager.xml, src/device.xml) that TPMKeychainFprintd
uses, with fprintd's error names and state rules: a device must be claimed before VerifyStart and
Release, claiming twice is AlreadyInUse, VerifyStart with no prints is NoEnrolledPrints, VerifyStop
without a verification is NoActionInProgress.

Run on a private bus:
    DBUS_SYSTEM_BUS_ADDRESS=unix:path=... python3 -m dbusmock --system -t fprintd_template.py

Control it through the org.freedesktop.DBus.Mock interface of the manager object (mockctl.py):
    AddDevice(s name) -> o             a reader; the first one added is the default
    RemoveDevice(o device)
    SetEnrolledFingers(o device, as fingers)
    SetVerifyScript(o device, a(sbu) script)
        what each VerifyStart emits: VerifyStatus(result, done) after delay milliseconds, in
        order; an empty script emits nothing (the person never touches the reader)
    SetMethodError(o device, s method, s error_name, s message)
        every later call of the device's method fails with error_name ("" clears it)
Each device object's own org.freedesktop.DBus.Mock interface has dbusmock's call log (GetCalls,
ClearCalls).
'''

import dbus
from gi.repository import GLib

from dbusmock import MOCK_IFACE, mockobject

BUS_NAME = 'net.reactivated.Fprint'
MAIN_OBJ = '/net/reactivated/Fprint/Manager'
MAIN_IFACE = 'net.reactivated.Fprint.Manager'
DEVICE_IFACE = 'net.reactivated.Fprint.Device'
SYSTEM_BUS = True

ERROR_PREFIX = 'net.reactivated.Fprint.Error.'


def fprint_error(name, message):
    return dbus.exceptions.DBusException(message, name=ERROR_PREFIX + name)


def load(mock, _parameters):
    mock.fprint_devices = []
    mock.fprint_next_device = 0
    mock.AddMethods(MAIN_IFACE, [
        ('GetDevices', '', 'ao', manager_get_devices),
        ('GetDefaultDevice', '', 'o', manager_get_default_device),
    ])


def manager_get_devices(self):
    return dbus.Array([dbus.ObjectPath(path) for path in self.fprint_devices], signature='o')


def manager_get_default_device(self):
    if not self.fprint_devices:
        raise fprint_error('NoSuchDevice', 'No devices available')
    return dbus.ObjectPath(self.fprint_devices[0])


def device(path):
    try:
        return mockobject.objects[path]
    except KeyError as e:
        raise dbus.exceptions.DBusException(f'no device {path}', name='org.freedesktop.DBus.Mock.NameError') from e


def injected_error(self, method):
    if method in self.fprint_errors:
        name, message = self.fprint_errors[method]
        raise dbus.exceptions.DBusException(message, name=name)


def schedule(self, milliseconds, action):
    '''Runs action from the main loop after milliseconds, unless stop_script comes first.'''
    source = None

    def fire():
        if source in self.fprint_timers:
            self.fprint_timers.remove(source)
        action()
        return False

    source = GLib.timeout_add(milliseconds, fire)
    self.fprint_timers.append(source)


def stop_script(self):
    for source in self.fprint_timers:
        GLib.source_remove(source)
    self.fprint_timers = []


def device_claim(self, _username):
    injected_error(self, 'Claim')
    if self.fprint_claimed:
        raise fprint_error('AlreadyInUse', 'Device was already claimed')
    self.fprint_claimed = True


def device_release(self):
    injected_error(self, 'Release')
    if not self.fprint_claimed:
        raise fprint_error('ClaimDevice', 'Device was not claimed before use')
    # fprintd cancels an action still running when its client releases the device.
    stop_script(self)
    self.fprint_verifying = False
    self.fprint_claimed = False


def device_list_enrolled_fingers(self, _username):
    injected_error(self, 'ListEnrolledFingers')
    if not self.fprint_fingers:
        raise fprint_error('NoEnrolledPrints', 'Failed to discover prints')
    return dbus.Array(self.fprint_fingers, signature='s')


def device_verify_start(self, finger):
    injected_error(self, 'VerifyStart')
    if not self.fprint_claimed:
        raise fprint_error('ClaimDevice', 'Device was not claimed before use')
    if self.fprint_verifying:
        raise fprint_error('AlreadyInUse', 'Verification already in progress')
    if not self.fprint_fingers:
        raise fprint_error('NoEnrolledPrints', 'No fingerprints enrolled')
    if finger != 'any' and finger not in self.fprint_fingers:
        raise fprint_error('NoEnrolledPrints', f'No such finger enrolled: {finger}')
    self.fprint_verifying = True

    script = list(self.fprint_script)

    def play(index):
        # One step at a time, each scheduled when the one before it has been emitted, so the
        # statuses arrive in the script's order whatever their delays.
        if index >= len(script):
            return
        result, done, milliseconds = script[index]

        def emit():
            self.EmitSignal(DEVICE_IFACE, 'VerifyStatus', 'sb', [result, done])
            play(index + 1)

        schedule(self, milliseconds, emit)

    # Emitted from the main loop, after the VerifyStart reply, as fprintd does.
    def select():
        self.EmitSignal(DEVICE_IFACE, 'VerifyFingerSelected', 's', [finger])
        play(0)

    schedule(self, 0, select)


def device_verify_stop(self):
    injected_error(self, 'VerifyStop')
    if not self.fprint_verifying:
        raise fprint_error('NoActionInProgress', 'No verification in progress')
    stop_script(self)
    self.fprint_verifying = False


@dbus.service.method(MOCK_IFACE, in_signature='s', out_signature='o')
def AddDevice(self, name):
    path = f'/net/reactivated/Fprint/Device/{self.fprint_next_device}'
    self.fprint_next_device += 1
    self.AddObject(path, DEVICE_IFACE, {
        'name': dbus.String(name, variant_level=1),
        'num-enroll-stages': dbus.Int32(5, variant_level=1),
        'scan-type': dbus.String('press', variant_level=1),
        'finger-present': dbus.Boolean(False, variant_level=1),
        'finger-needed': dbus.Boolean(False, variant_level=1),
    }, [])
    obj = mockobject.objects[path]
    obj.fprint_fingers = []
    obj.fprint_script = []
    obj.fprint_errors = {}
    obj.fprint_timers = []
    obj.fprint_claimed = False
    obj.fprint_verifying = False
    obj.AddMethods(DEVICE_IFACE, [
        ('Claim', 's', '', device_claim),
        ('Release', '', '', device_release),
        ('ListEnrolledFingers', 's', 'as', device_list_enrolled_fingers),
        ('VerifyStart', 's', '', device_verify_start),
        ('VerifyStop', '', '', device_verify_stop),
    ])
    self.fprint_devices.append(path)
    return dbus.ObjectPath(path)


@dbus.service.method(MOCK_IFACE, in_signature='o', out_signature='')
def RemoveDevice(self, path):
    obj = device(path)
    stop_script(obj)
    self.fprint_devices.remove(path)
    self.RemoveObject(path)


@dbus.service.method(MOCK_IFACE, in_signature='oas', out_signature='')
def SetEnrolledFingers(self, path, fingers):
    device(path).fprint_fingers = [str(finger) for finger in fingers]


@dbus.service.method(MOCK_IFACE, in_signature='oa(sbu)', out_signature='')
def SetVerifyScript(self, path, script):
    device(path).fprint_script = [(str(result), bool(done), int(delay)) for result, done, delay in script]


@dbus.service.method(MOCK_IFACE, in_signature='osss', out_signature='')
def SetMethodError(self, path, method, error_name, message):
    obj = device(path)
    if error_name:
        obj.fprint_errors[str(method)] = (str(error_name), str(message))
    else:
        obj.fprint_errors.pop(str(method), None)
