"""A deliberately buggy SUT for the replay test: it serves a TCP port (so it can be probed
ready) and, whenever it is resumed after a pause (SIGCONT), logs an assertion failure."""

import signal
import socket
import sys
import time


def on_cont(signum, frame):
    print("assertion failed: resumed after a pause (seeded bug)", flush=True)


signal.signal(signal.SIGCONT, on_cont)
server = socket.create_server((sys.argv[1], int(sys.argv[2])))
print("listening", flush=True)
server.settimeout(0.2)
while True:
    try:
        conn, _ = server.accept()
        conn.close()
    except socket.timeout:
        pass
    time.sleep(0.01)
