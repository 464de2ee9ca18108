"""The stand-in's one thread: a selector loop that accepts connections, moves their bytes between
the sockets and proton, runs timers, and closes a connection whose handling failed."""

from __future__ import annotations

import contextlib
import heapq
import itertools
import selectors
import socket
import ssl
import threading
import time
import traceback
from collections.abc import Callable, Iterator

from proton import TransportException

from .connection import Conn, ConnectionLost

_RST = b"\x01\x00\x00\x00\x00\x00\x00\x00"  # SO_LINGER on, 0 s: close() sends a reset
_IDLE = 0.5  # longest wait for the selector, so ticks and the stop flag are seen


class Loop:
    """Serves the connections; ``process`` (given to :meth:`start`) handles proton's events."""

    def __init__(self, stats: dict[str, int], ssl_ctx: ssl.SSLContext | None) -> None:
        self.stats = stats
        self._ssl_ctx = ssl_ctx
        self._process: Callable[[Conn], None] = lambda c: None
        self._sel: selectors.BaseSelector | None = None
        self._listener: socket.socket | None = None
        self._wake_r: socket.socket | None = None
        self._wake_w: socket.socket | None = None
        self._thread: threading.Thread | None = None
        self._stopping = False
        self._lock = threading.Lock()
        self._drop_all = False
        self._hostile: list[str] = []  # modes for the next connections (connection.HOSTILE_MODES)
        self._conns: dict[int, Conn] = {}
        self._conn_ids = itertools.count(1)
        self._timers: list[tuple[float, int, Callable[[], None]]] = []
        self._timer_seq = itertools.count()
        self.error: BaseException | None = None  # the loop itself failed (it stopped)
        self.errors: list[str] = []  # a connection's handling failed (that connection was closed)

    # ------------------------------------------------------------------------------ control

    def start(self, host: str, port: int, process: Callable[[Conn], None]) -> int:
        """Listen on ``host:port`` (0: any free port) in a new thread; return the port."""
        ls = socket.create_server((host, port), reuse_port=False)
        ls.setblocking(False)
        port = ls.getsockname()[1]
        self._process = process
        self._listener = ls
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._sel = selectors.DefaultSelector()
        self._sel.register(ls, selectors.EVENT_READ, "listen")
        self._sel.register(self._wake_r, selectors.EVENT_READ, "wake")
        self._stopping = False
        self._thread = threading.Thread(
            target=self._run, name=f"eventhubs-standin:{port}", daemon=True
        )
        self._thread.start()
        return port

    def stop(self, timeout: float) -> None:
        if not self._thread:
            return
        self._stopping = True
        self._wake()
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise RuntimeError("Event Hubs stand-in thread did not stop")
        self._thread = None

    @property
    def started(self) -> bool:
        return self._thread is not None

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    @property
    def open_connections(self) -> int:
        return len(self._conns)

    def hostile_next(self, mode: str, n: int = 1) -> None:
        """Serve the next ``n`` connections as a hostile peer (``connection.HOSTILE_MODES``)."""
        with self._lock:
            self._hostile += [mode] * n

    def clear_hostile(self) -> None:
        with self._lock:
            self._hostile.clear()

    def drop_connections(self) -> None:
        """Have the loop close every connection, abruptly, on its next turn."""
        with self._lock:
            self._drop_all = True
        self._wake()

    def wake(self) -> None:
        """Have the loop turn now (new events for readers, a stop)."""
        self._wake()

    def _wake(self) -> None:
        if self._wake_w is not None:
            with contextlib.suppress(OSError):
                self._wake_w.send(b"x")

    # ------------------------------------------------------------------------------ the loop

    def _run(self) -> None:
        assert self._sel is not None
        try:
            while not self._stopping:
                self._turn()
        except BaseException as exc:  # pragma: no cover - surfaced through .error
            self.error = exc
            raise
        finally:
            for c in list(self._conns.values()):
                self.close(c)
            for s in (self._listener, self._wake_r, self._wake_w):
                if s is not None:
                    s.close()
            self._sel.close()
            self._listener = self._wake_r = self._wake_w = None

    def _turn(self) -> None:
        """Serve what is ready, run due timers, then let every engine tick and send."""
        assert self._sel is not None
        for key, mask in self._sel.select(self._next_timeout()):
            if key.data == "listen":
                self._accept()
            elif key.data == "wake":
                self._drain_wake()
            elif not key.data.closed:
                c = key.data
                with self._guard(c):
                    if mask & selectors.EVENT_READ:
                        self._on_readable(c)
                    if mask & selectors.EVENT_WRITE and not c.closed:
                        self._send_out(c)
        self._run_timers()
        with self._lock:
            drop, self._drop_all = self._drop_all, False
        if drop:
            for c in list(self._conns.values()):
                self.close(c, dropped=True)
        now = time.time()
        for c in list(self._conns.values()):
            if not c.closed:
                with self._guard(c):
                    c.transport.tick(now)
                    self.pump(c)

    def _drain_wake(self) -> None:
        assert self._wake_r is not None
        try:
            while self._wake_r.recv(4096):
                pass
        except BlockingIOError:
            pass

    @contextlib.contextmanager
    def _guard(self, c: Conn) -> Iterator[None]:
        """A bug while serving one connection closes that connection, is recorded in ``errors``
        (tests assert it stays empty), and leaves the others running."""
        try:
            yield
        except Exception:
            self.errors.append(traceback.format_exc())
            self.close(c)

    # ------------------------------------------------------------------------------ timers

    def _next_timeout(self) -> float:
        t = _IDLE
        if self._timers:
            t = min(t, max(0.0, self._timers[0][0] - time.monotonic()))
        return t

    def schedule(self, delay: float, fn: Callable[[], None]) -> None:
        """Run ``fn`` on the loop's thread after ``delay`` seconds."""
        heapq.heappush(self._timers, (time.monotonic() + delay, next(self._timer_seq), fn))

    def _run_timers(self) -> None:
        now = time.monotonic()
        while self._timers and self._timers[0][0] <= now:
            _, _, fn = heapq.heappop(self._timers)
            try:
                fn()
            except Exception:
                self.errors.append(traceback.format_exc())

    # ------------------------------------------------------------------------------ connections

    def _accept(self) -> None:
        assert self._listener is not None and self._sel is not None
        while True:
            try:
                sock, _ = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            c = Conn.accept(next(self._conn_ids), sock, self._ssl_ctx)
            with self._lock:
                c.hostile = self._hostile.pop(0) if self._hostile else None
            self._conns[c.id] = c
            self.stats["connections"] += 1
            self._sel.register(sock, selectors.EVENT_READ, c)

    def _on_readable(self, c: Conn) -> None:
        try:
            eof = c.receive()
        except ConnectionLost:
            self.close(c)
            return
        if eof is None:
            return
        if c.hostile is not None:
            self._send_out(c)
            if eof:
                self.close(c)
            return
        c.push_input(self._process)
        if eof and not c.inbuf and not c.closed:
            c.transport.close_tail()
        self.pump(c)

    def pump(self, c: Conn) -> None:
        """Handle proton's events, then move its output to the socket."""
        if c.closed or c.hostile is not None:
            return
        self._process(c)
        if c.inbuf:
            c.push_input(self._process)
        c.take_output()
        self._send_out(c)
        if not c.closed and c.transport.closed and not c.outbuf:
            self.close(c)

    def _send_out(self, c: Conn) -> None:
        assert self._sel is not None
        if not c.flush():
            self.close(c)
            return
        want = selectors.EVENT_READ | (selectors.EVENT_WRITE if c.outbuf else 0)
        try:
            if self._sel.get_key(c.sock).events != want:
                self._sel.modify(c.sock, want, c)
        except (KeyError, ValueError):
            pass

    def close(self, c: Conn, dropped: bool = False) -> None:
        """Close ``c``'s socket; ``dropped``: abruptly (a reset), as a lost connection ends."""
        if c.closed:
            return
        c.closed = True
        if dropped:
            self.stats["dropped_connections"] += 1
        self._conns.pop(c.id, None)
        try:
            assert self._sel is not None
            self._sel.unregister(c.sock)
        except (KeyError, ValueError, AssertionError):
            pass
        try:
            if dropped:
                c.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _RST)
            c.sock.close()
        except OSError:
            pass
        with contextlib.suppress(TransportException):
            c.transport.unbind()
