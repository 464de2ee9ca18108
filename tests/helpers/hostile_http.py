"""A hostile HTTP peer on loopback: answers that never end, bodies and headers trickled a byte at a
time, a compression bomb, error bodies that quote the request path back (Express's ``Cannot POST
/…``, plain, cut, percent-encoded, JSON-escaped). Raw sockets, so nothing in between is polite.

The mode is the first path segment: ``http://127.0.0.1:PORT/<mode>/<secret path…>``, or the
peer's ``mode`` for a client whose paths are fixed (IMDS's).
"""

from __future__ import annotations

import functools
import gzip
import json
import socket
import ssl
import threading
import time
from typing import Any, Self
from urllib.parse import quote


@functools.cache
def _bomb() -> bytes:
    """64 MiB of zeros in 64 KiB of gzip (made once: the peer must answer at once)."""
    return gzip.compress(b"\0" * (64 * 1024 * 1024), compresslevel=1)


class HostilePeer:
    """``tls``: answer over TLS with these files (``standins.tls.generate``), for clients that
    send a token only over https; ``give_up_after``: the endless modes stop after this many body
    bytes (so a test against an unbounded client fails instead of filling the machine)."""

    def __init__(
        self, mode: str | None = None, *, tls: Any = None, give_up_after: int | None = None
    ) -> None:
        self.mode = mode
        self.give_up_after = give_up_after
        self.tls = None
        if tls is not None:
            self.tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            self.tls.load_cert_chain(tls.cert, tls.key)
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.sent: dict[str, int] = {}  # mode -> body bytes written before the client left
        self.closed = threading.Event()  # set when a client went away mid-answer
        self._stop = False
        threading.Thread(target=self._accept, daemon=True).start()

    def url(self, mode: str, secret: str) -> str:
        return f"{self.base}/{mode}/{secret}"

    @property
    def base(self) -> str:
        return f"https://localhost:{self.port}" if self.tls else f"http://127.0.0.1:{self.port}"

    def close(self) -> None:
        self._stop = True
        self.sock.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _accept(self) -> None:
        while not self._stop:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        if self.tls is not None:
            try:
                conn = self.tls.wrap_socket(conn, server_side=True)
            except OSError:
                conn.close()
                return
        with conn:
            head = b""
            while b"\r\n\r\n" not in head:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                head += chunk
            path = head.split(b" ", 2)[1].decode()
            mode = self.mode or path.strip("/").split("/", 1)[0]
            try:
                getattr(self, "_" + mode.replace("-", "_"))(conn, path)
            except OSError:  # the client went away: what a bounded client does
                self.closed.set()

    # -- the modes ------------------------------------------------------------------------------

    def _huge(self, conn: socket.socket, path: str) -> None:
        """400 with a chunked body that never ends (64 KiB chunks until the client leaves)."""
        conn.sendall(
            b"HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n"
        )
        chunk = b"x" * 65536
        frame = f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n"
        self.sent["huge"] = 0
        while not self._stop and (
            self.give_up_after is None or self.sent["huge"] < self.give_up_after
        ):
            conn.sendall(frame)
            self.sent["huge"] += len(chunk)

    def _trickle_body(self, conn: socket.socket, path: str) -> None:
        conn.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 1000\r\n\r\n")
        for _ in range(1000):
            if self._stop:
                return
            conn.sendall(b"x")
            time.sleep(0.5)

    def _trickle_headers(self, conn: socket.socket, path: str) -> None:
        for byte in b"HTTP/1.1 200 OK\r\nX-Slow: " + b"y" * 1000:
            if self._stop:
                return
            conn.sendall(bytes([byte]))
            time.sleep(0.5)

    def _bomb(self, conn: socket.socket, path: str) -> None:
        body = _bomb()
        conn.sendall(
            b"HTTP/1.1 400 Bad Request\r\nContent-Encoding: gzip\r\n"
            + f"Content-Length: {len(body)}\r\n\r\n".encode()
            + body
        )

    def _echo(self, conn: socket.socket, path: str) -> None:
        """404 quoting the path back several ways, the first one cut near 200 characters."""
        body = (
            "x" * 150
            + f" Cannot POST {path}\n"
            + f"Cannot POST {quote(path, safe='')}\n"
            + quote(path, safe="").lower()
            + "\n"
            + json.dumps({"error": path}).replace("/", "\\/")
        )
        self._answer(conn, 404, body)

    def _no_service(self, conn: socket.socket, path: str) -> None:
        self._answer(conn, 404, "no_service")

    def _answer(self, conn: socket.socket, status: int, text: str) -> None:
        data = text.encode()
        conn.sendall(
            f"HTTP/1.1 {status} X\r\nContent-Type: text/plain\r\nConnection: close\r\n"
            f"Content-Length: {len(data)}\r\n\r\n".encode()
            + data
        )
