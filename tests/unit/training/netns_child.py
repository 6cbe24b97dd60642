"""Run inside a namespace by test_netns.py: which network namespace, which interfaces, and loopback at work.

    python tests/unit/training/netns_child.py   (prints one JSON line)
"""

import json
import os
import socket

server = socket.create_server(("localhost", 0))
with socket.create_connection(server.getsockname()[:2]) as client:
    connection, _ = server.accept()
    client.sendall(b"over loopback")
    received = connection.recv(64).decode()
    connection.close()
server.close()
print(json.dumps({
    "netns": os.readlink("/proc/self/ns/net"),
    "interfaces": sorted(name for _, name in socket.if_nameindex()),
    "received": received,
}))
