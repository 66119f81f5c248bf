'''systemd-logind mock template for python-dbusmock (Debian 12: python3-dbusmock 0.28.7)

python-dbusmock's own logind template, loaded as is, plus the lookups it lacks. LogindSessionLockTests
(Tests/FprintdTests) run it on a private bus:
    DBUS_SYSTEM_BUS_ADDRESS=unix:path=... python3 -m dbusmock --system -t logind_template.py

From the stock template (dbusmock/templates/logind.py):
    Mock.AddSession(s id, s seat, u uid, s user, b active) -> s   a session (LockedHint false), its
                                                                   seat and user
    Session.SetLockedHint(b)   sets LockedHint and emits PropertiesChanged(Session, {LockedHint}, []),
                               as logind does when a screen locker calls it
    Session.Lock(), Unlock()   emit the Lock and Unlock signals, as logind's LockSession does
Added here, with logind's error names (src/login/logind-dbus.c):
    Manager.GetSessionByPID(u pid) -> o   from the table SetSessionForPID fills; NoSessionForPID
    Manager.GetSession(s id) -> o         NoSuchSession for a session that does not exist (the stock
                                          template answers any id)
    Manager.GetUser(u uid) -> o           NoSuchUser for a user that does not exist (likewise)
    Mock.SetSessionForPID(u pid, s id)    the session GetSessionByPID answers for pid
    Mock.SetDisplay(u uid, s id)          User.Display = (id, session path); "" clears it to ("", "/")
    Mock.RemoveSession(s id)              removes the session and emits Manager.SessionRemoved(id, path)
'''

import dbus

from dbusmock import MOCK_IFACE, mockobject
# The stock template's D-Bus methods (AddSeat, AddUser, AddSession, ListSessions, ...): dbusmock
# registers every decorated function it finds in this module.
from dbusmock.templates import logind as stock
from dbusmock.templates.logind import *  # noqa: F401,F403 pylint: disable=wildcard-import,unused-wildcard-import

BUS_NAME = stock.BUS_NAME
MAIN_OBJ = stock.MAIN_OBJ
MAIN_IFACE = stock.MAIN_IFACE
SYSTEM_BUS = True

SESSION_IFACE = 'org.freedesktop.login1.Session'
USER_IFACE = 'org.freedesktop.login1.User'
ERROR_PREFIX = 'org.freedesktop.login1.'


def session_path(session_id):
    return dbus.ObjectPath('/org/freedesktop/login1/session/' + session_id)


def user_path(uid):
    return dbus.ObjectPath(f'/org/freedesktop/login1/user/{uid}')


def login1_error(name, message):
    return dbus.exceptions.DBusException(message, name=ERROR_PREFIX + name)


def load(mock, parameters):
    stock.load(mock, parameters)
    mock.logind_pid_sessions = {}
    # After stock.load: these replace its GetSession and GetUser, which answer any argument.
    mock.AddMethods(MAIN_IFACE, [
        ('GetSession', 's', 'o', get_session),
        ('GetUser', 'u', 'o', get_user),
        ('GetSessionByPID', 'u', 'o', get_session_by_pid),
    ])


def get_session(_self, session_id):
    path = session_path(session_id)
    if path not in mockobject.objects:
        raise login1_error('NoSuchSession', f'No session \'{session_id}\' known')
    return path


def get_user(_self, uid):
    path = user_path(uid)
    if path not in mockobject.objects:
        raise login1_error('NoSuchUser', f'User ID {uid} is not logged in')
    return path


def get_session_by_pid(self, pid):
    session_id = self.logind_pid_sessions.get(int(pid))
    if session_id is None or session_path(session_id) not in mockobject.objects:
        raise login1_error('NoSessionForPID', f'PID {pid} does not belong to any known session')
    return session_path(session_id)


@dbus.service.method(MOCK_IFACE, in_signature='us', out_signature='')
def SetSessionForPID(self, pid, session_id):
    self.logind_pid_sessions[int(pid)] = str(session_id)


@dbus.service.method(MOCK_IFACE, in_signature='us', out_signature='')
def SetDisplay(_self, uid, session_id):
    user = mockobject.objects[user_path(uid)]
    display = (session_id, session_path(session_id)) if session_id else ('', dbus.ObjectPath('/'))
    # Properties.Set, not UpdateProperties: 0.28.7's UpdateProperties cannot wrap a struct.
    user.Set(USER_IFACE, 'Display', dbus.Struct(display, signature='so'))


@dbus.service.method(MOCK_IFACE, in_signature='s', out_signature='')
def RemoveSession(self, session_id):
    path = session_path(session_id)
    self.RemoveObject(path)
    self.EmitSignal(MAIN_IFACE, 'SessionRemoved', 'so', [session_id, path])
