"""What an Event Hubs peer can make the agent read, bounded in size and time.

azure-eventhub's AMQP client proposes 1 MiB frames in its ``Open`` but reads what the peer sends:
a frame header announcing 4 GB made it allocate that much before reading a byte of it, and a peer
that never answered the TLS handshake, the SASL exchange or the ``Open`` (or trickled a frame a
byte at a time) held ``send_batch`` far past its ``timeout``, which covers the link's answers
only. Through public APIs only: the SDK takes an ``ssl.SSLContext`` (its ``ssl_context``), whose
``sslsocket_class`` (Python's documented hook) makes its sockets ``BoundedSocket``s. These read
the AMQP frame headers as the bytes pass: a frame larger than ``max_frame_bytes`` closes the
connection before the SDK sees its size. And while the sink sends, a deadline watches them: at
``seconds`` after the send began every socket of the producer is shut down, so whatever the SDK
was waiting for ends at once.
"""

from __future__ import annotations

import contextlib
import errno
import socket
import ssl
import threading
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from ...clock import SYSTEM, Clock

# The frame size the SDK proposes in its Open (AMQP: a peer must not send larger frames).
MAX_FRAME_BYTES = 1024 * 1024
_PROTOCOL_HEADER = b"AMQP"  # "AMQP" + 4 bytes: the protocol headers (SASL, then AMQP)


class PeerBound:
    """One sink's bounds: the frame size its sockets let through, the deadline of a send."""

    def __init__(
        self, seconds: float, *, max_frame_bytes: int = MAX_FRAME_BYTES, clock: Clock = SYSTEM
    ) -> None:
        self.seconds = seconds
        self.max_frame_bytes = max_frame_bytes
        self.clock = clock
        self.problem: str | None = None  # why the last send's connection was closed here
        self._sockets: weakref.WeakSet[BoundedSocket] = weakref.WeakSet()
        self._lock = threading.Lock()
        self._fired = False

    def context(self, ca_file: str | None) -> ssl.SSLContext:
        """The TLS context for the SDK's ``ssl_context``: what it would build itself
        (``ca_file``, or certifi's bundle as the SDK defaults to), its sockets bounded."""
        import certifi

        ctx = ssl.create_default_context(cafile=ca_file or certifi.where())
        ctx.sslsocket_class = type("BoundedSocket", (BoundedSocket,), {"bound": self})
        return ctx

    @contextmanager
    def sending(self) -> Iterator[None]:
        """A deadline of ``seconds`` from now over every socket of the producer, those it
        opens meanwhile included."""
        self.problem = None
        ended = self.clock.event()
        thread = threading.Thread(
            target=self._watch, args=(ended,), daemon=True, name="event-hubs-deadline"
        )
        self.clock.track(thread)
        thread.start()
        try:
            yield
        finally:
            with self._lock:
                ended.set()
                self._fired = False

    def _watch(self, ended: threading.Event) -> None:
        if self.clock.wait(ended, self.seconds):
            return
        with self._lock:
            if ended.is_set():
                return
            self._fired = True
            self.problem = f"no answer within {self.seconds:g} s: connection closed"
            for sock in list(self._sockets):
                _shut(sock)

    def watch(self, sock: BoundedSocket) -> None:
        """A socket of the producer: shut down at the deadline (at once if it has passed)."""
        with self._lock:
            self._sockets.add(sock)
            if self._fired:
                _shut(sock)

    def refuse(self, sock: BoundedSocket, why: str) -> OSError:
        self.problem = why
        _shut(sock)
        return OSError(errno.EPROTO, why)


def _shut(sock: socket.socket) -> None:
    # the plain socket's shutdown, under TLS too: a waiting read ends at once
    with contextlib.suppress(OSError):
        socket.socket.shutdown(sock, socket.SHUT_RDWR)


class BoundedSocket(ssl.SSLSocket):
    """The SDK's TLS socket, reading the AMQP frame headers that pass through it. ``bound`` is
    set on the subclass each ``PeerBound.context`` makes."""

    bound: PeerBound
    _frames: _Frames | None = None

    def do_handshake(self, *args: Any, **kwargs: Any) -> None:
        self.bound.watch(self)
        super().do_handshake(*args, **kwargs)

    def recv(self, buflen: int = 1024, flags: int = 0) -> bytes:
        data = super().recv(buflen, flags)
        self._scan(data)
        return data

    def recv_into(self, buffer: Any, nbytes: int | None = None, flags: int = 0) -> int:
        n = super().recv_into(buffer, nbytes, flags)
        self._scan(memoryview(buffer)[:n])
        return n

    def _scan(self, data: Any) -> None:
        """Follow the frames: the rest of the current one to skip, or a header being read."""
        if self._frames is None:
            self._frames = _Frames()
        why = self._frames.feed(bytes(data), self.bound.max_frame_bytes)
        if why is not None:
            raise self.bound.refuse(self, why)


class _Frames:
    __slots__ = ("head", "left")

    def __init__(self) -> None:
        self.head = b""  # the header read so far
        self.left = 0  # bytes of the current frame still to pass

    def feed(self, data: bytes, limit: int) -> str | None:
        """None, or why the peer's frame is refused."""
        i, n = 0, len(data)
        while i < n:
            if self.left:
                take = min(self.left, n - i)
                self.left -= take
                i += take
                continue
            take = min(8 - len(self.head), n - i)
            self.head += data[i : i + take]
            i += take
            if len(self.head) < 8:
                continue
            head, self.head = self.head, b""
            if head[:4] == _PROTOCOL_HEADER:
                continue
            size = int.from_bytes(head[:4], "big")
            if size < 8 or size > limit:
                return (
                    f"the peer sent an AMQP frame of {size} bytes (at most {limit}): "
                    f"connection closed"
                )
            self.left = size - 8
        return None
