"""The floors of an unchanged poll: the least a Python process can do per poll, for poll_cost.

    python floor_poller.py http.client http://127.0.0.1:PORT [--interval 1.0]
    python floor_poller.py socket http://127.0.0.1:PORT [--interval 1.0]

``http.client``: one keep-alive ``HTTPConnection``, ``request`` + ``getresponse`` + ``read``.
``socket``: one keep-alive socket, the request's bytes written once, one ``recv`` per answer
(the simulator's answer to an unchanged document fits one read; no parsing at all). Both compare
the body with the last one (what "unchanged" costs the agent) and sleep the interval. Each sends
``User-Agent: floor-<kind>``; runs until SIGTERM or SIGINT.
"""

from __future__ import annotations

import argparse
import http.client
import signal
import socket
import sys
import time
from urllib.parse import urlsplit

PATH = "/metadata/scheduledevents?api-version=2020-07-01"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("kind", choices=("http.client", "socket"))
    ap.add_argument("endpoint")
    ap.add_argument("--interval", type=float, default=1.0)
    args = ap.parse_args()
    url = urlsplit(args.endpoint)
    host, port = url.hostname or "127.0.0.1", url.port or 80
    running = True

    def on_signal(_signum: int, _frame: object) -> None:
        nonlocal running
        running = False

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    ua = f"floor-{args.kind}"
    last = b""
    if args.kind == "http.client":
        conn = http.client.HTTPConnection(host, port, timeout=2)
        headers = {"Metadata": "true", "User-Agent": ua}
        while running:
            conn.request("GET", PATH, headers=headers)
            body = conn.getresponse().read()
            if body != last:
                last = body
            time.sleep(args.interval)
    else:
        sock = socket.create_connection((host, port), timeout=2)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        request = (
            f"GET {PATH} HTTP/1.1\r\nHost: {host}:{port}\r\nMetadata: true\r\n"
            f"User-Agent: {ua}\r\n\r\n"
        ).encode()
        while running:
            sock.sendall(request)
            answer = sock.recv(65536)
            body = answer[answer.find(b"\r\n\r\n") + 4 :]
            if body != last:
                last = body
            time.sleep(args.interval)
    return 0


if __name__ == "__main__":
    sys.exit(main())
