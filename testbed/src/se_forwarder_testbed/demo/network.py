"""One VM's way out to Log Analytics: a loopback TCP relay its agent's sink connects through, so
the demo can cut that VM's network (a reboot that leaves it offline, an eviction) without
touching the others or the service. Cut: open connections are closed and new ones refused, as
an unreachable network looks to a client; restored: connections go through again."""

from __future__ import annotations

import contextlib
import socket
import threading


class Link:
    def __init__(self, target_port: int, host: str = "127.0.0.1") -> None:
        self.host, self.target_port = host, target_port
        self.up = True
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()
        self._server = socket.create_server((host, 0))
        self.port: int = self._server.getsockname()[1]
        self._closed = False
        threading.Thread(target=self._accept, name=f"link-{self.port}", daemon=True).start()

    def cut(self) -> None:
        with self._lock:
            self.up = False
            conns, self._open = list(self._open), set()
        for c in conns:
            _close(c)

    def restore(self) -> None:
        with self._lock:
            self.up = True

    def close(self) -> None:
        self._closed = True
        self.cut()
        _close(self._server)

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            with self._lock:
                up = self.up
            if not up:
                _close(client)
                continue
            try:
                upstream = socket.create_connection((self.host, self.target_port), timeout=5)
            except OSError:
                _close(client)
                continue
            upstream.settimeout(None)
            with self._lock:
                self._open.update((client, upstream))
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=_pump, args=(a, b), daemon=True).start()


def _pump(src: socket.socket, dst: socket.socket) -> None:
    try:
        while data := src.recv(65536):
            dst.sendall(data)
    except OSError:
        pass
    finally:
        _close(src)
        _close(dst)


def _close(s: socket.socket) -> None:
    with contextlib.suppress(OSError):
        s.shutdown(socket.SHUT_RDWR)
    s.close()
