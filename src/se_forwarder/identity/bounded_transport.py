"""azure-core's ``requests`` transport with every answer read within a size and an overall deadline.

azure-core reads a whole answer with per-read timeouts only: a peer answering without end, or a
byte at a time, costs memory or a hung delivery thread. Through public APIs only, the transport
here is azure-core's ``RequestsTransport`` given a ``requests.Session`` (its ``session=``) whose
``HTTPAdapter.send`` (requests' documented override point) reads each answer itself: at most
``max_bytes`` (decoded, so a compression bomb stops there too), with one deadline for the whole
answer (from the request sent to the answer's last byte; connecting and sending keep their own
timeouts), and hands requests the bytes read. Past either bound the connection is closed and a
``requests`` error is raised that azure-core turns into ``ServiceResponseError`` (the size) or
``ServiceResponseTimeoutError`` (the deadline), which the sinks retry.

The deadline covers the headers too: the adapter's pools make their connections as
``WatchedHTTP(S)Connection``s (urllib3's documented ``ConnectionCls``, through the pool manager's
``pool_classes_by_scheme``), which hand their socket, when the answer is about to be read, to a
timer that shuts it down at the deadline (through a duplicate of its descriptor, from the
public ``fileno()``); a read that was waiting then ends at once. Through an http:// or https://
proxy the proxy manager's pools are made watched the same way (requests' ``proxy_manager_for``,
its documented override point), the tunnel inside TLS to an https:// proxy included. A SOCKS
proxy is refused with one clear error (its connections could not be watched).

Imported only by the Azure sinks (``requests`` is azure-core's dependency, never the run path's).
"""

from __future__ import annotations

import contextlib
import io
import os
import socket
import threading
from typing import Any

import requests
from azure.core.pipeline.transport import RequestsTransport
from requests.adapters import HTTPAdapter
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool
from urllib3.exceptions import HTTPError, ProtocolError, ReadTimeoutError
from urllib3.util.retry import Retry

from ..clock import SYSTEM, Clock

CHUNK = 64 * 1024
SOCKS_REFUSED = (
    "SOCKS proxies are not supported: an answer through one cannot be bounded; "
    "use an http:// or https:// proxy"
)


_CURRENT = threading.local()  # the watch of the request this thread is sending, if any


class Watch:
    """Shuts down the socket of one answer at its deadline, unless ended first. The deadline
    runs from the request's start, and again from the answer's once armed (the request's
    connect and send have their own timeouts)."""

    def __init__(self, seconds: float, clock: Clock) -> None:
        self.seconds = seconds
        self.deadline = clock.monotonic() + seconds
        self.clock = clock
        self.fired = False
        self._lock = threading.Lock()
        self._ended = clock.event()
        self._sock: socket.socket | None = None  # a duplicate of the answer's descriptor

    def arm(self, fd: int) -> None:
        """Watch the connection whose descriptor is ``fd``, through a duplicate of it: a
        shutdown acts on the connection, whichever descriptor it is called on, and the duplicate
        is this watch's own (never a number the connection's owner may close and reuse)."""
        try:
            sock = socket.socket(fileno=os.dup(fd))
        except OSError:
            return
        with self._lock:
            if self._sock is not None or self._ended.is_set():
                sock.close()
                return
            self._sock = sock
        self.deadline = self.clock.monotonic() + self.seconds
        thread = threading.Thread(target=self._watch, daemon=True, name="answer-deadline")
        self.clock.track(thread)
        thread.start()

    def _watch(self) -> None:
        if self.clock.wait(self._ended, max(0.0, self.deadline - self.clock.monotonic())):
            return
        with self._lock:
            if self._ended.is_set() or self._sock is None:
                return
            self.fired = True
            # under TLS, and TLS inside TLS, too: the reader sees the end at once
            with contextlib.suppress(OSError):
                self._sock.shutdown(socket.SHUT_RDWR)

    def end(self) -> bool:
        """Disarm (closing the duplicate); True when the deadline had already fired."""
        with self._lock:
            self._ended.set()
            if self._sock is not None:
                self._sock.close()
            return self.fired


class _Watched:
    """Arms the current request's watch with this connection's descriptor before the answer
    (``fileno()``: public on a socket, a TLS socket, and urllib3's ``SSLTransport``, the TLS
    inside TLS of a tunnel through an https proxy)."""

    def getresponse(self, *args: Any, **kwargs: Any) -> Any:
        watch = getattr(_CURRENT, "watch", None)
        sock = getattr(self, "sock", None)
        if watch is not None and sock is not None:
            try:
                fd = sock.fileno()
            except (OSError, AttributeError):
                fd = -1
            if fd >= 0:
                watch.arm(fd)
        return super().getresponse(*args, **kwargs)  # type: ignore[misc]


class WatchedHTTPConnection(_Watched, HTTPConnection):
    pass


class WatchedHTTPSConnection(_Watched, HTTPSConnection):
    pass


class WatchedHTTPConnectionPool(HTTPConnectionPool):
    ConnectionCls = WatchedHTTPConnection


class WatchedHTTPSConnectionPool(HTTPSConnectionPool):
    ConnectionCls = WatchedHTTPSConnection


WATCHED_POOLS = {"http": WatchedHTTPConnectionPool, "https": WatchedHTTPSConnectionPool}


class BoundedAdapter(HTTPAdapter):
    """An ``HTTPAdapter`` reading each answer whole but bounded (no retries, no redirects: the
    callers own both, as with azure-core's own adapter)."""

    def __init__(self, max_bytes: int, seconds: float, clock: Clock = SYSTEM) -> None:
        super().__init__(max_retries=Retry(total=False, redirect=False, raise_on_status=False))
        self.max_bytes = max_bytes
        self.seconds = seconds
        self.clock = clock

    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        super().init_poolmanager(*args, **kwargs)
        self.poolmanager.pool_classes_by_scheme = dict(WATCHED_POOLS)

    def proxy_manager_for(self, proxy: str, **proxy_kwargs: Any) -> Any:
        """The proxy's pools watched too (requests' override point for subclasses): through an
        http:// or https:// proxy the connection to it, or the tunnel through it (TLS inside
        TLS for an https:// proxy), is a watched connection, so a peer trickling its answer a
        byte at a time ends at the deadline as it does when reached directly. A
        SOCKS proxy is refused, with or without PySocks: its connections are its own, so no
        answer through it could be bounded (one clear error, retried, never a silent hang)."""
        if proxy.lower().startswith("socks"):
            raise requests.exceptions.InvalidSchema(
                f"{SOCKS_REFUSED} (proxy {proxy.split(':', 1)[0].lower()}://…)"
            )
        manager = super().proxy_manager_for(proxy, **proxy_kwargs)
        manager.pool_classes_by_scheme = dict(WATCHED_POOLS)
        return manager

    def send(
        self,
        request: requests.PreparedRequest,
        stream: bool = False,
        timeout: Any = None,
        verify: Any = True,
        cert: Any = None,
        proxies: Any = None,
    ) -> requests.Response:
        outer = getattr(_CURRENT, "watch", None)
        watch = _CURRENT.watch = Watch(self.seconds, self.clock)
        response = None
        try:
            response = super().send(
                request,
                stream=True,
                timeout=self._capped(timeout),
                verify=verify,
                cert=cert,
                proxies=proxies,
            )
            body = self._read(response.raw, watch.deadline, request)
        except Exception as exc:
            if response is not None:
                response.raw.close()  # urllib3 closes the connection: never back to the pool
            if watch.end():
                raise requests.exceptions.ReadTimeout(
                    f"no whole answer within {self.seconds:g} s: connection closed", request=request
                ) from exc
            raise
        finally:
            watch.end()
            _CURRENT.watch = outer
        if watch.fired:  # it fired as the answer ended: whole, but its socket is shut down
            response.raw.close()
        else:
            response.raw.release_conn()
        response.raw = io.BytesIO(body)  # requests and azure-core read the body from here
        return response

    def _capped(self, timeout: Any) -> Any:
        """The read timeout no longer than the deadline (a silent peer ends there)."""
        if isinstance(timeout, tuple):
            connect, read = timeout
            return connect, self.seconds if read is None else min(read, self.seconds)
        return self.seconds if timeout is None else min(timeout, self.seconds)

    def _read(self, raw: Any, deadline: float, request: requests.PreparedRequest) -> bytes:
        parts: list[bytes] = []
        size = 0
        while True:
            try:
                data = raw.read1(min(CHUNK, self.max_bytes + 1 - size), decode_content=True)
            except ReadTimeoutError as exc:
                raise requests.exceptions.ReadTimeout(exc, request=request) from exc
            except HTTPError as exc:
                raise requests.exceptions.ConnectionError(
                    ProtocolError(str(exc)), request=request
                ) from exc
            if not data:
                return b"".join(parts)
            size += len(data)
            if size > self.max_bytes:
                raise requests.exceptions.ConnectionError(
                    ProtocolError(f"answer over {self.max_bytes} bytes: connection closed"),
                    request=request,
                )
            if self.clock.monotonic() > deadline:
                raise requests.exceptions.ReadTimeout(
                    f"no whole answer within {self.seconds:g} s: connection closed", request=request
                )
            parts.append(data)


def transport(
    max_bytes: int, seconds: float, clock: Clock = SYSTEM, **config: Any
) -> RequestsTransport:
    """A new ``RequestsTransport`` (it owns and closes its session); ``config`` is azure-core's
    connection configuration (``connection_timeout``, ``read_timeout``, ``connection_verify``)."""
    session = requests.Session()
    adapter = BoundedAdapter(max_bytes, seconds, clock)
    for prefix in ("http://", "https://"):
        session.mount(prefix, adapter)
    return RequestsTransport(session=session, session_owner=True, **config)
