#!/usr/bin/python3
"""A Secret portal client, as libsecret in a Flatpak is one (SecretPortalTests).

  portal_client.py frontend   org.freedesktop.portal.Secret.RetrieveSecret through
                              xdg-desktop-portal, with a pipe: prints the secret in hex, or
                              "response N" for a refusal, or "error NAME"
  portal_client.py backend    the backend's RetrieveSecret called directly, as a program that is
                              not the frontend would: "error NAME", or the secret in hex
  portal_client.py malformed  the backend's RetrieveSecret with arguments of the wrong types
  portal_client.py hangup     as frontend, with the pipe's read end closed before the call: the
                              backend meets a reader that left
Optional second argument: the bus address (default: the session bus).
"""
import os
import secrets
import sys

from jeepney import DBusAddress, MatchRule, MessageType, message_bus, new_method_call
from jeepney.io.blocking import Proxy, open_dbus_connection

connection = open_dbus_connection(bus=sys.argv[2] if len(sys.argv) > 2 else "SESSION", enable_fds=True)
read_end, write_end = os.pipe()

if sys.argv[1] == "malformed":
    backend = DBusAddress("/org/freedesktop/portal/desktop",
                          bus_name="org.freedesktop.impl.portal.desktop.tpmkeychain",
                          interface="org.freedesktop.impl.portal.Secret")
    reply = connection.send_and_get_reply(new_method_call(
        backend, "RetrieveSecret", "ssu", ("/not/a/path", "org.example.App", 7)), timeout=30)
    print("error", reply.header.fields.get(4, "none"))
    sys.exit(0)
if sys.argv[1] == "hangup":
    os.close(read_end)
if sys.argv[1] == "backend":
    backend = DBusAddress("/org/freedesktop/portal/desktop",
                          bus_name="org.freedesktop.impl.portal.desktop.tpmkeychain",
                          interface="org.freedesktop.impl.portal.Secret")
    reply = connection.send_and_get_reply(new_method_call(
        backend, "RetrieveSecret", "osha{sv}",
        ("/org/freedesktop/portal/desktop/request/1_1/t", "org.example.App", write_end, {})), timeout=30)
    os.close(write_end)
    if reply.header.message_type == MessageType.error:
        print("error", reply.header.fields[4])
        sys.exit(0)
else:
    portal = DBusAddress("/org/freedesktop/portal/desktop", bus_name="org.freedesktop.portal.Desktop",
                         interface="org.freedesktop.portal.Secret")
    token = "t" + secrets.token_hex(8)
    sender = connection.unique_name[1:].replace(".", "_")
    rule = MatchRule(type="signal", interface="org.freedesktop.portal.Request", member="Response",
                     path=f"/org/freedesktop/portal/desktop/request/{sender}/{token}")
    Proxy(message_bus, connection).AddMatch(rule)
    with connection.filter(rule) as queue:
        reply = connection.send_and_get_reply(new_method_call(
            portal, "RetrieveSecret", "ha{sv}", (write_end, {"handle_token": ("s", token)})), timeout=30)
        os.close(write_end)
        if reply.header.message_type == MessageType.error:
            print("error", reply.header.fields[4])
            sys.exit(0)
        response = connection.recv_until_filtered(queue, timeout=30)
        if response.body[0] != 0:
            print("response", response.body[0])
            sys.exit(0)
if sys.argv[1] == "hangup":
    print("answered")
    sys.exit(0)
data = b""
while chunk := os.read(read_end, 4096):
    data += chunk
print(data.hex())
