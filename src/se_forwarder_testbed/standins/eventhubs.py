"""Event Hubs stand-in: an AMQP 1.0 listener (python-qpid-proton) for the unmodified azure-eventhub SDK.

What it does, as the service does (see ``shared/spec/azure-sinks.md``):

* SASL ANONYMOUS, AMQP open/begin; plain AMQP or TLS (the generated certificate).
* CBS on ``$cbs``: ``put-token`` with a SAS token (HMAC-SHA256 with a configured key) or a JWT from
  the :class:`~se_forwarder.standins.tokens.TokenAuthority` (audience ``https://eventhubs.azure.net``).
  A bad or expired token gets 401; a valid token is accepted (202) and remembered on the
  connection for the entity it names. A sender attach to a hub without an accepted token that
  carries the ``Send`` right (a SAS policy with Send, or a JWT whose subject holds "Azure Event
  Hubs Data Sender") is refused with ``amqp:unauthorized-access``, as the service refuses it.
* ``$management`` READ of ``com.microsoft:eventhub`` and ``com.microsoft:partition``.
* Sender links to ``amqps://host/hub`` and ``.../hub/Partitions/N``; the attach carries the
  configured ``max_message_size``. Batched transfers (format ``0x80013700``) are unpacked into one
  event per Data section; plain messages are one event each. Too large → rejected with
  ``amqp:link:message-size-exceeded``.
* Fault injection: rejected deliveries (``com.microsoft:server-busy``), dropped connections (now,
  or when the next transfers arrive), slow acceptance.
* Every performative leaves padded to its full field count (see :mod:`.amqp_frames`).

Single thread, a selector loop around proton's engine (``Transport``/``Connection``/``Collector``);
TLS is done with :mod:`ssl` memory BIOs, so proton only ever sees the plain AMQP stream.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import heapq
import hmac
import itertools
import selectors
import socket
import ssl
import threading
import time
import traceback
import urllib.parse
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Self

from proton import (
    UNDESCRIBED,
    Array,
    Collector,
    Condition,
    Connection,
    Data,
    Delivery,
    Event,
    Link,
    Message,
    Transport,
    TransportException,
    int32,
    symbol,
    timestamp,
)

from . import amqp_frames
from .tls import TlsFiles
from .tokens import EVENTHUBS_AUDIENCE, InvalidToken, TokenAuthority

DEFAULT_MAX_MESSAGE_SIZE = 1024 * 1024  # Standard tier
SAS_TOKEN_TYPE = "servicebus.windows.net:sastoken"
JWT_TOKEN_TYPE = "jwt"
SERVER_BUSY = "com.microsoft:server-busy"
MESSAGE_SIZE_EXCEEDED = "amqp:link:message-size-exceeded"
UNAUTHORIZED = "amqp:unauthorized-access"
NOT_FOUND = "amqp:not-found"
DATA_SENDER_ROLE = "Azure Event Hubs Data Sender"
PARTITION_KEY = "x-opt-partition-key"
_CREDIT = 500
_MAX_FRAME = 65536


class ReceivedEvent:
    """One event as stored by the stand-in (one Data section of a batch, or one plain message).

    Kept as the encoded AMQP message; its sections are decoded on first access, so that taking
    events in stays cheap."""

    __slots__ = (
        "_batch_key",
        "_decoded",
        "connection_id",
        "enqueued_time",
        "hub",
        "offset",
        "partition_id",
        "raw",
        "sequence_number",
    )

    def __init__(self, hub: str, partition_id: str, sequence_number: int, enqueued_time: float,
                 raw: bytes, connection_id: int = 0, batch_key: str | None = None) -> None:
        self.hub = hub
        self.partition_id = partition_id
        self.sequence_number = sequence_number
        self.offset = sequence_number
        self.enqueued_time = enqueued_time  # epoch seconds
        self.raw = raw  # the event's encoded AMQP message
        self.connection_id = connection_id
        self._batch_key = batch_key
        self._decoded: dict[str, Any] | None = None

    def _d(self) -> dict[str, Any]:
        if self._decoded is None:
            self._decoded = _message_sections(self.raw)
        return self._decoded

    @property
    def body(self) -> bytes:
        return _body_bytes(self._d())

    @property
    def content_type(self) -> str | None:
        return self._d()["properties"][6]

    @property
    def properties(self) -> dict[str, Any]:
        """Application properties."""
        return self._d()["application_properties"]

    @property
    def annotations(self) -> dict[str, Any]:
        """Message annotations (symbol keys as str)."""
        return self._d()["annotations"]

    @property
    def message_id(self) -> Any:
        return self._d()["properties"][0]

    @property
    def correlation_id(self) -> Any:
        return self._d()["properties"][5]

    @property
    def partition_key(self) -> str | None:
        k = self.annotations.get(PARTITION_KEY, self._batch_key)
        return None if k is None else str(k)

    def json(self) -> Any:
        import json

        return json.loads(self.body)

    def __repr__(self) -> str:
        return (f"ReceivedEvent(hub={self.hub!r}, partition_id={self.partition_id!r}, "
                f"sequence_number={self.sequence_number}, body={self.body[:80]!r}, "
                f"properties={self.properties!r}, partition_key={self.partition_key!r})")


@dataclass
class _Grant:
    scope: str  # entity path the token covers ("" = the whole namespace)
    rights: frozenset[str]
    expires_at: float
    who: str


@dataclass
class _Conn:
    id: int
    sock: socket.socket
    transport: Transport
    connection: Connection
    collector: Collector
    tls: _TlsLayer | None
    padder: amqp_frames.OutboundPadder = field(default_factory=amqp_frames.OutboundPadder)
    scanner: amqp_frames.InboundScanner = field(default_factory=amqp_frames.InboundScanner)
    outbuf: bytearray = field(default_factory=bytearray)
    inbuf: bytearray = field(default_factory=bytearray)
    grants: list[_Grant] = field(default_factory=list)
    reply_links: dict[str, Link] = field(default_factory=dict)  # "$cbs"/"$management" -> our sender
    hub_links: dict[str, tuple[str, str | None]] = field(default_factory=dict)  # link name -> hub, partition
    closed: bool = False
    tag_seq: itertools.count = field(default_factory=itertools.count)


class _TlsLayer:
    """Server-side TLS over memory BIOs: raw bytes in and out, plain AMQP to proton."""

    def __init__(self, context: ssl.SSLContext) -> None:
        self._in, self._out = ssl.MemoryBIO(), ssl.MemoryBIO()
        self._obj = context.wrap_bio(self._in, self._out, server_side=True)
        self._ready = False
        self._pending_plain = bytearray()
        self.eof = False

    def receive(self, raw: bytes) -> bytes:
        if raw:
            self._in.write(raw)
        else:
            self._in.write_eof()
        if not self._ready:
            try:
                self._obj.do_handshake()
            except ssl.SSLWantReadError:
                return b""
            self._ready = True
            if self._pending_plain:
                self._obj.write(bytes(self._pending_plain))
                self._pending_plain.clear()
        chunks = []
        while True:
            try:
                chunk = self._obj.read(262144)
            except ssl.SSLWantReadError:
                break
            except ssl.SSLZeroReturnError:
                self.eof = True
                break
            if not chunk:
                self.eof = True
                break
            chunks.append(chunk)
        return b"".join(chunks)

    def send(self, plain: bytes) -> None:
        if self._ready:
            self._obj.write(plain)
        else:
            self._pending_plain += plain

    def outgoing(self) -> bytes:
        return self._out.read()


def _plain(value: Any) -> Any:
    """proton / codec values → plain Python (symbols and AnnotationDict keys as str)."""
    if isinstance(value, dict):
        return {(str(k) if isinstance(k, str) else k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)) and not isinstance(value, str):
        return [_plain(v) for v in value]
    if isinstance(value, memoryview):
        return bytes(value)
    if isinstance(value, str):
        return str(value)
    return value


def partition_for_key(key: str, partitions: int) -> int:
    """Stable partition for a partition key (same key → same partition, in every process)."""
    digest = hashlib.sha256(key.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") % partitions


def make_sas_token(resource: str, key_name: str, key: str, expiry: float | None = None) -> str:
    """A SAS token as the SDKs make it (``SharedAccessSignature sr=…&sig=…&se=…&skn=…``)."""
    se = int(time.time() + 3600 if expiry is None else expiry)
    encoded_uri = urllib.parse.quote_plus(resource)
    sig = base64.b64encode(hmac.new(key.encode("utf-8"), f"{encoded_uri}\n{se}".encode(),
                                    hashlib.sha256).digest())
    return "SharedAccessSignature " + urllib.parse.urlencode(
        {"sr": resource, "sig": sig, "se": str(se), "skn": key_name})


def _entity_path(uri: str) -> str:
    """``sb://host:port/hub/Partitions/0`` → ``hub/Partitions/0`` (lower-cased, no slashes around)."""
    if "://" in uri:
        uri = urllib.parse.urlsplit(uri).path
    return urllib.parse.unquote(uri).strip("/").lower()


def _covers(scope: str, entity: str) -> bool:
    return scope == "" or entity == scope or entity.startswith(scope + "/")


class EventHubsStandIn:
    """An Event Hubs namespace on localhost for the real azure-eventhub SDK.

    ``hubs`` maps hub name → partition count. ``sas_keys`` maps a policy name to its key, or to
    ``(key, rights)`` with rights from {"Send", "Listen", "Manage"} (a bare key has all three).
    ``allowed_subjects``: JWT subjects holding "Azure Event Hubs Data Sender" (None = every subject
    with a valid token). Without a ``token_authority`` JWTs are refused.
    """

    def __init__(self, host: str = "127.0.0.1", port: int = 0, tls: TlsFiles | None = None, *,
                 hubs: dict[str, int] | None = None,
                 sas_keys: dict[str, str | tuple[str, Iterable[str]]] | None = None,
                 token_authority: TokenAuthority | None = None,
                 allowed_subjects: Iterable[str] | None = None,
                 max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE,
                 hostname: str = "localhost") -> None:
        self.host = host
        self._requested_port = port
        self.tls = tls
        self.hostname = hostname
        self.hubs = dict(hubs if hubs is not None else {"scheduled-events": 4})
        self._sas: dict[str, tuple[str, frozenset[str]]] = {}
        for name, v in (sas_keys if sas_keys is not None else
                        {"RootManageSharedAccessKey": base64.b64encode(
                            hashlib.sha256(b"se-forwarder stand-in").digest()).decode()}).items():
            key, rights = (v, ("Send", "Listen", "Manage")) if isinstance(v, str) else v
            self._sas[name] = (key, frozenset(rights))
        self.token_authority = token_authority
        self.allowed_subjects = None if allowed_subjects is None else frozenset(allowed_subjects)
        self.max_message_size = max_message_size
        self.created_at = time.time()

        self._lock = threading.Condition()
        self._events: list[ReceivedEvent] = []
        self._seq: dict[tuple[str, str], int] = {}
        self._last_enqueued: dict[tuple[str, str], float] = {}
        self._rr: dict[str, int] = {}
        self._reject: list[tuple[int, str, str]] = []  # remaining, condition, description
        self._drop_next = 0
        self._drop_now = False
        self._accept_delay = 0.0
        self.stats = {"connections": 0, "transfers": 0, "accepted": 0, "rejected": 0,
                      "dropped_connections": 0, "put_tokens": 0, "refused_tokens": 0,
                      "refused_attaches": 0, "management_requests": 0}

        self._sel: selectors.BaseSelector | None = None
        self._listener: socket.socket | None = None
        self._wake_r: socket.socket | None = None
        self._wake_w: socket.socket | None = None
        self._thread: threading.Thread | None = None
        self._stopping = False
        self._conns: dict[int, _Conn] = {}
        self._conn_ids = itertools.count(1)
        self._timers: list[tuple[float, int, Callable[[], None]]] = []
        self._timer_seq = itertools.count()
        self._ssl_ctx = tls.server_context() if tls else None
        self.port = 0
        self.error: BaseException | None = None  # the loop itself failed (it stopped)
        self.errors: list[str] = []  # a connection's handling failed (that connection was closed)

    # ------------------------------------------------------------------------------ lifecycle

    def start(self) -> Self:
        if self._thread:
            return self
        ls = socket.create_server((self.host, self._requested_port), reuse_port=False)
        ls.setblocking(False)
        self.port = ls.getsockname()[1]
        self._listener = ls
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._sel = selectors.DefaultSelector()
        self._sel.register(ls, selectors.EVENT_READ, "listen")
        self._sel.register(self._wake_r, selectors.EVENT_READ, "wake")
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name=f"eventhubs-standin:{self.port}",
                                        daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        if not self._thread:
            return
        self._stopping = True
        self._wake()
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise RuntimeError("Event Hubs stand-in thread did not stop")
        self._thread = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    # ------------------------------------------------------------------------------ addresses

    @property
    def namespace(self) -> str:
        """``host:port`` (what ``fully_qualified_namespace`` takes with ``custom_endpoint_address``)."""
        return f"{self.hostname}:{self.port}"

    @property
    def endpoint(self) -> str:
        """For ``custom_endpoint_address`` (TLS)."""
        return f"sb://{self.hostname}:{self.port}"

    def connection_string(self, hub: str | None = None, key_name: str | None = None) -> str:
        """A SAS connection string. Plain listener: ``UseDevelopmentEmulator=true`` (AMQP without
        TLS). TLS listener: also pass ``custom_endpoint_address=standin.endpoint`` and
        ``connection_verify=<ca.pem>`` to the SDK."""
        key_name = key_name or next(iter(self._sas))
        parts = [f"Endpoint=sb://{self.hostname}:{self.port}", f"SharedAccessKeyName={key_name}",
                 f"SharedAccessKey={self._sas[key_name][0]}"]
        if hub:
            parts.append(f"EntityPath={hub}")
        if not self.tls:
            parts.append("UseDevelopmentEmulator=true")
        return ";".join(parts)

    def sas_token(self, hub: str | None = None, key_name: str | None = None,
                  expiry: float | None = None) -> str:
        key_name = key_name or next(iter(self._sas))
        resource = f"sb://{self.hostname}:{self.port}/{hub or ''}"
        return make_sas_token(resource, key_name, self._sas[key_name][0], expiry)

    # ------------------------------------------------------------------------------ fault injection

    def reject_next(self, n: int = 1, condition: str = SERVER_BUSY,
                    description: str | None = None) -> None:
        """Reject the next ``n`` transfers to a hub (nothing stored) with ``condition``."""
        if description is None:
            description = ("The request was terminated because the entity is being throttled. "
                           "Error code : 50002. Please wait 4 seconds and try again."
                           if condition == SERVER_BUSY else f"{condition} (injected)")
        with self._lock:
            self._reject.append((n, condition, description))

    def drop_connections(self) -> None:
        """Close every client connection now, abruptly (no AMQP close)."""
        with self._lock:
            self._drop_now = True
        self._wake()

    def drop_next(self, n: int = 1) -> None:
        """Drop the connection carrying each of the next ``n`` transfers to a hub, before it is
        stored or settled (the client never learns whether it arrived: it did not)."""
        with self._lock:
            self._drop_next += n

    def set_accept_delay(self, seconds: float) -> None:
        """Settle hub transfers only after ``seconds`` (slow acceptance)."""
        with self._lock:
            self._accept_delay = max(0.0, float(seconds))

    def set_max_message_size(self, size: int) -> None:
        """Change the limit enforced on transfers, and announced on later attaches."""
        with self._lock:
            self.max_message_size = int(size)

    def clear_faults(self) -> None:
        with self._lock:
            self._reject.clear()
            self._drop_next = 0
            self._accept_delay = 0.0

    # ------------------------------------------------------------------------------ queries

    @property
    def events(self) -> list[ReceivedEvent]:
        with self._lock:
            return list(self._events)

    def events_for(self, hub: str | None = None, partition_id: str | int | None = None
                   ) -> list[ReceivedEvent]:
        pid = None if partition_id is None else str(partition_id)
        with self._lock:
            return [e for e in self._events if (hub is None or e.hub == hub)
                    and (pid is None or e.partition_id == pid)]

    def by_property(self, name: str, value: Any = ...) -> list[ReceivedEvent]:
        """Events whose application property ``name`` exists (and equals ``value`` if given)."""
        with self._lock:
            return [e for e in self._events if name in e.properties
                    and (value is ... or e.properties[name] == value)]

    def by_partition(self, hub: str | None = None) -> dict[str, list[ReceivedEvent]]:
        out: dict[str, list[ReceivedEvent]] = {}
        for e in self.events_for(hub):
            out.setdefault(e.partition_id, []).append(e)
        return out

    def wait_for(self, count: int, timeout: float = 10.0, hub: str | None = None
                 ) -> list[ReceivedEvent]:
        """Wait until at least ``count`` events (of ``hub``) are stored; return them all.
        Raises TimeoutError saying how many arrived."""
        deadline = time.monotonic() + timeout

        def have() -> list[ReceivedEvent]:
            return [e for e in self._events if hub is None or e.hub == hub]

        with self._lock:
            while True:
                got = have()
                if len(got) >= count:
                    return got
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"{len(got)} of {count} events arrived within {timeout} s")
                self._lock.wait(left)

    def clear(self) -> None:
        with self._lock:
            self._events.clear()

    # ------------------------------------------------------------------------------ loop

    def _wake(self) -> None:
        if self._wake_w is not None:
            try:
                self._wake_w.send(b"x")
            except OSError:
                pass

    def _run(self) -> None:
        assert self._sel is not None
        try:
            while not self._stopping:
                timeout = self._next_timeout()
                for key, mask in self._sel.select(timeout):
                    if key.data == "listen":
                        self._accept()
                    elif key.data == "wake":
                        try:
                            while self._wake_r.recv(4096):  # type: ignore[union-attr]
                                pass
                        except BlockingIOError:
                            pass
                    else:
                        c = key.data
                        if c.closed:
                            continue
                        with self._guard(c):
                            if mask & selectors.EVENT_READ:
                                self._on_readable(c)
                            if mask & selectors.EVENT_WRITE and not c.closed:
                                self._send_out(c)
                self._run_timers()
                with self._lock:
                    drop, self._drop_now = self._drop_now, False
                if drop:
                    for c in list(self._conns.values()):
                        self._close(c, dropped=True)
                now = time.time()
                for c in list(self._conns.values()):
                    if not c.closed:
                        with self._guard(c):
                            c.transport.tick(now)
                            self._pump(c)
        except BaseException as exc:  # pragma: no cover - surfaced through .error
            self.error = exc
            raise
        finally:
            for c in list(self._conns.values()):
                self._close(c)
            for s in (self._listener, self._wake_r, self._wake_w):
                if s is not None:
                    s.close()
            self._sel.close()
            self._listener = self._wake_r = self._wake_w = None

    @contextlib.contextmanager
    def _guard(self, c: _Conn) -> Iterator[None]:
        """A bug while serving one connection closes that connection, is recorded in ``errors``
        (tests assert it stays empty), and leaves the others running."""
        try:
            yield
        except Exception:  # noqa: BLE001
            self.errors.append(traceback.format_exc())
            self._close(c)

    @property
    def open_connections(self) -> int:
        return len(self._conns)

    def _next_timeout(self) -> float:
        t = 0.5
        if self._timers:
            t = min(t, max(0.0, self._timers[0][0] - time.monotonic()))
        return t

    def _schedule(self, delay: float, fn: Callable[[], None]) -> None:
        heapq.heappush(self._timers, (time.monotonic() + delay, next(self._timer_seq), fn))

    def _run_timers(self) -> None:
        now = time.monotonic()
        while self._timers and self._timers[0][0] <= now:
            _, _, fn = heapq.heappop(self._timers)
            try:
                fn()
            except Exception:  # noqa: BLE001
                self.errors.append(traceback.format_exc())

    def _accept(self) -> None:
        assert self._listener is not None and self._sel is not None
        while True:
            try:
                sock, _ = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            transport = Transport(Transport.SERVER)
            transport.max_frame_size = _MAX_FRAME
            transport.channel_max = 4999
            sasl = transport.sasl()
            sasl.allowed_mechs("ANONYMOUS")
            connection = Connection()
            collector = Collector()
            connection.collect(collector)
            transport.bind(connection)
            c = _Conn(next(self._conn_ids), sock, transport, connection, collector,
                      _TlsLayer(self._ssl_ctx) if self._ssl_ctx else None)
            self._conns[c.id] = c
            self.stats["connections"] += 1
            self._sel.register(sock, selectors.EVENT_READ, c)

    def _on_readable(self, c: _Conn) -> None:
        try:
            raw = c.sock.recv(262144)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self._close(c)
            return
        if c.tls is not None:
            try:
                plain = c.tls.receive(raw)
            except ssl.SSLError:
                self._close(c)
                return
            eof = not raw or c.tls.eof
        else:
            plain, eof = raw, not raw
        if plain:
            try:
                c.scanner.feed(plain)
            except ValueError:
                self._close(c)
                return
            c.inbuf += plain
        self._push_input(c)
        if eof and not c.inbuf and not c.closed:
            c.transport.close_tail()
        self._pump(c)

    def _push_input(self, c: _Conn) -> None:
        while c.inbuf and not c.closed:
            cap = c.transport.capacity()
            if cap <= 0:
                if cap < 0:
                    c.inbuf.clear()
                break
            chunk = bytes(c.inbuf[:cap])
            del c.inbuf[:cap]
            try:
                c.transport.push(chunk)
            except TransportException:  # a protocol error: proton closes the connection
                c.inbuf.clear()
                break
            self._process(c)

    def _pump(self, c: _Conn) -> None:
        """Handle proton's events, then move its output to the socket."""
        if c.closed:
            return
        self._process(c)
        if c.inbuf:
            self._push_input(c)
        while True:
            pending = c.transport.pending()
            if pending <= 0:
                break
            out = c.transport.peek(pending)
            c.transport.pop(pending)
            padded = c.padder.feed(out)
            if c.tls is not None:
                c.tls.send(padded)
            else:
                c.outbuf += padded
        if c.tls is not None:
            c.outbuf += c.tls.outgoing()
        self._send_out(c)
        if not c.closed and c.transport.closed and not c.outbuf:
            self._close(c)

    def _send_out(self, c: _Conn) -> None:
        assert self._sel is not None
        while c.outbuf:
            try:
                n = c.sock.send(c.outbuf)
            except (BlockingIOError, InterruptedError):
                break
            except OSError:
                self._close(c)
                return
            del c.outbuf[:n]
        want = selectors.EVENT_READ | (selectors.EVENT_WRITE if c.outbuf else 0)
        try:
            if self._sel.get_key(c.sock).events != want:
                self._sel.modify(c.sock, want, c)
        except (KeyError, ValueError):
            pass

    def _close(self, c: _Conn, dropped: bool = False) -> None:
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
            if dropped:  # RST rather than FIN: as abrupt as a lost connection gets
                c.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
            c.sock.close()
        except OSError:
            pass
        with contextlib.suppress(TransportException):
            c.transport.unbind()

    # ------------------------------------------------------------------------------ AMQP events

    def _process(self, c: _Conn) -> None:
        ev = c.collector.peek()
        while ev is not None and not c.closed:
            self._dispatch(c, ev)
            c.collector.pop()
            ev = c.collector.peek()

    def _dispatch(self, c: _Conn, ev: Event) -> None:
        t = ev.type
        if t == Event.CONNECTION_REMOTE_OPEN:
            conn = ev.connection
            conn.container = f"se-forwarder-eventhubs-standin-{uuid.uuid4().hex[:8]}"
            conn.hostname = self.hostname
            conn.open()
        elif t == Event.SESSION_REMOTE_OPEN:
            ev.session.open()
        elif t == Event.LINK_REMOTE_OPEN:
            self._on_attach(c, ev.link)
        elif t == Event.DELIVERY:
            d = ev.delivery
            if d.link.is_receiver and d.readable and not d.partial and not d.settled:
                self._on_delivery(c, d)
        elif t == Event.LINK_REMOTE_CLOSE:
            link = ev.link
            c.hub_links.pop(link.name, None)
            for k, v in list(c.reply_links.items()):
                if v.name == link.name:
                    del c.reply_links[k]
            if link.state & Link.LOCAL_ACTIVE:
                link.close()
        elif t == Event.SESSION_REMOTE_CLOSE:
            if ev.session.state & ev.session.LOCAL_ACTIVE:
                ev.session.close()
        elif t == Event.CONNECTION_REMOTE_CLOSE and ev.connection.state & ev.connection.LOCAL_ACTIVE:
            ev.connection.close()

    def _on_attach(self, c: _Conn, link: Link) -> None:
        link.source.copy(link.remote_source)
        link.target.copy(link.remote_target)
        if link.is_sender:  # the client's receiver: replies of $cbs / $management
            address = link.remote_source.address or ""
            if address in ("$cbs", "$management"):
                c.reply_links[address] = link
                link.snd_settle_mode = Link.SND_SETTLED
                link.open()
            else:
                self._refuse(link, NOT_FOUND, f"The messaging entity '{address}' could not be "
                             "found (this stand-in has no receivers).")
            return
        address = link.remote_target.address or ""
        if address in ("$cbs", "$management"):
            link.open()
            link.flow(_CREDIT)
            return
        entity = _entity_path(address)
        parts = entity.split("/")
        hub = next((h for h in self.hubs if h.lower() == parts[0]), None)
        partition: str | None = None
        if hub is None or (len(parts) > 1 and not (len(parts) == 3 and parts[1] == "partitions")):
            self._refuse(link, NOT_FOUND, f"The messaging entity 'sb://{self.hostname}/{entity}' "
                         "could not be found.")
            return
        if len(parts) == 3:
            if not parts[2].isdigit() or int(parts[2]) >= self.hubs[hub]:
                self._refuse(link, NOT_FOUND, f"The specified partition '{parts[2]}' is invalid for "
                             f"event hub '{hub}'.")
                return
            partition = str(int(parts[2]))
        if not self._authorized(c, hub.lower(), "Send"):
            self.stats["refused_attaches"] += 1
            self._refuse(link, UNAUTHORIZED, "Unauthorized access. 'Send' claim(s) are required to "
                         f"perform this operation. Resource: 'sb://{self.hostname}/{hub}'.")
            return
        with self._lock:
            link.max_message_size = self.max_message_size
        c.hub_links[link.name] = (hub, partition)
        link.open()
        link.flow(_CREDIT)

    @staticmethod
    def _refuse(link: Link, condition: str, description: str) -> None:
        """Attach (echoing source and target, which the SDK requires) then detach with an error."""
        link.condition = Condition(condition, description,
                                   {symbol("com.microsoft:tracking-id"): uuid.uuid4().hex})
        link.open()
        link.close()

    def _authorized(self, c: _Conn, entity: str, right: str) -> bool:
        now = time.time()
        return any(g.expires_at > now and right in g.rights and _covers(g.scope, entity)
                   for g in c.grants)

    # ------------------------------------------------------------------------------ deliveries

    def _on_delivery(self, c: _Conn, d: Delivery) -> None:
        link = d.link
        data = link.recv(d.pending) or b""
        link.advance()
        fmt = c.scanner.next_format(link.name)
        if link.credit < _CREDIT // 2:
            link.flow(_CREDIT - link.credit)
        address = link.remote_target.address or ""
        if d.aborted:
            d.settle()
            return
        if address == "$cbs":
            self._on_cbs(c, d, data)
        elif address == "$management":
            self._on_management(c, d, data)
        elif link.name in c.hub_links:
            self._on_hub_transfer(c, d, data, fmt, *c.hub_links[link.name])
        else:
            self._settle(d, Delivery.REJECTED, NOT_FOUND, "link is not attached to an entity")

    def _settle(self, d: Delivery, state: int, condition: str | None = None,
                description: str | None = None) -> None:
        if condition is not None:
            d.local.condition = Condition(condition, description,
                                          {symbol("com.microsoft:tracking-id"): uuid.uuid4().hex})
        d.update(state)
        d.settle()

    def _reply(self, c: _Conn, which: str, request: Message, status: int, description: str,
               body: Any = None) -> None:
        link = c.reply_links.get(which)
        if link is None:
            return
        props: dict[str, Any] = {"status-code": int32(status), "status-description": description}
        if which == "$management":
            props = {"statusCode": int32(status), "statusDescription": description, **props}
        reply = Message(body=body, properties=props, correlation_id=request.id)
        dlv = link.delivery(str(next(c.tag_seq)))
        link.send(reply.encode())
        link.advance()
        dlv.settle()

    def _accept_request(self, d: Delivery, data: bytes) -> Message | None:
        """Decode a request on $cbs or $management and settle it: Accepted, or Rejected with a
        decode error (then None)."""
        msg = Message()
        try:
            msg.decode(data)
        except Exception:  # noqa: BLE001 - proton raises its own or Python's errors on bad input
            self._settle(d, Delivery.REJECTED, "amqp:decode-error", "message could not be decoded")
            return None
        self._settle(d, Delivery.ACCEPTED)
        return msg

    def _on_cbs(self, c: _Conn, d: Delivery, data: bytes) -> None:
        msg = self._accept_request(d, data)
        if msg is None:
            return
        props = _plain(msg.properties or {})
        self.stats["put_tokens"] += 1
        if props.get("operation") != "put-token":
            self._reply(c, "$cbs", msg, 400, f"Unsupported operation {props.get('operation')!r}.")
            return
        token = msg.body
        if isinstance(token, (bytes, memoryview)):
            token = bytes(token).decode("utf-8", "replace")
        try:
            grant = self._check_token(str(token or ""), str(props.get("type") or ""),
                                      str(props.get("name") or ""))
        except InvalidToken as exc:
            self.stats["refused_tokens"] += 1
            self._reply(c, "$cbs", msg, 401, str(exc))
            return
        c.grants.append(grant)
        self._reply(c, "$cbs", msg, 202, "Accepted")

    def _check_token(self, token: str, token_type: str, name: str) -> _Grant:
        audience_entity = _entity_path(name)
        if token_type == SAS_TOKEN_TYPE or token.startswith("SharedAccessSignature "):
            return self._check_sas(token, audience_entity)
        if token_type == JWT_TOKEN_TYPE:
            if self.token_authority is None:
                raise InvalidToken("InvalidIssuer: JWT tokens are not accepted by this namespace.")
            try:
                claims = self.token_authority.verify(token, EVENTHUBS_AUDIENCE)
            except InvalidToken as exc:
                raise InvalidToken(f"InvalidToken: {exc}.") from None
            subject = str(claims.get("sub"))
            holds_role = self.allowed_subjects is None or subject in self.allowed_subjects
            rights = frozenset({"Send"}) if holds_role else frozenset()
            return _Grant(audience_entity, rights, float(claims["exp"]), f"jwt:{subject}")
        raise InvalidToken(f"InvalidTokenType: token type {token_type!r} is not supported.")

    def _check_sas(self, token: str, audience_entity: str) -> _Grant:
        if not token.startswith("SharedAccessSignature "):
            raise InvalidToken("MalformedToken: not a SharedAccessSignature.")
        fields = dict(urllib.parse.parse_qsl(token[len("SharedAccessSignature "):],
                                             keep_blank_values=True))
        sr, sig, se, skn = (fields.get(k) for k in ("sr", "sig", "se", "skn"))
        if not (sr and sig and se and skn):
            raise InvalidToken("MalformedToken: the token needs sr, sig, se and skn.")
        entry = self._sas.get(skn)
        if entry is None:
            raise InvalidToken(f"InvalidSignature: unknown key name '{skn}'.")
        key, rights = entry
        expected = base64.b64encode(hmac.new(
            key.encode("utf-8"), f"{urllib.parse.quote_plus(sr)}\n{se}".encode(),
            hashlib.sha256).digest()).decode()
        if not hmac.compare_digest(expected, sig):
            raise InvalidToken("InvalidSignature: The token has an invalid signature.")
        try:
            expires = float(se)
        except ValueError:
            raise InvalidToken("MalformedToken: se is not a number.") from None
        if expires <= time.time():
            raise InvalidToken(f"ExpiredToken: The token is expired. Expiration time: '{int(expires)}'.")
        scope = _entity_path(sr)
        if not _covers(scope, audience_entity):
            raise InvalidToken(f"InvalidAudience: the token is for '{sr}', not for the entity "
                               f"'{audience_entity}'.")
        return _Grant(audience_entity, rights, expires, f"sas:{skn}")

    def _on_management(self, c: _Conn, d: Delivery, data: bytes) -> None:
        msg = self._accept_request(d, data)
        if msg is None:
            return
        self.stats["management_requests"] += 1
        props = _plain(msg.properties or {})
        op, kind, name = props.get("operation"), props.get("type"), props.get("name")
        if op != "READ":
            self._reply(c, "$management", msg, 400, f"Unsupported operation {op!r}.")
            return
        hub = next((h for h in self.hubs if h.lower() == str(name or "").lower()), None)
        if hub is None:
            self._reply(c, "$management", msg, 404, f"The messaging entity '{name}' could not be found.")
            return
        token = props.get("security_token")
        authorized = self._authorized(c, hub.lower(), "Send") or self._authorized(
            c, hub.lower(), "Listen") or self._authorized(c, hub.lower(), "Manage")
        if not authorized and token:
            try:
                g = self._check_token(str(token), "jwt" if not str(token).startswith(
                    "SharedAccessSignature") else SAS_TOKEN_TYPE, f"sb://{self.hostname}/{hub}")
                authorized = bool(g.rights)
            except InvalidToken:
                authorized = False
        if not authorized:
            self._reply(c, "$management", msg, 401, "Unauthorized access. 'Send', 'Listen' or "
                        "'Manage' claim(s) are required to perform this operation. Resource: "
                        f"'sb://{self.hostname}/{hub}'.")
            return
        n = self.hubs[hub]
        if kind == "com.microsoft:eventhub":
            body = {"name": hub, "type": "com.microsoft:eventhub",
                    "created_at": timestamp(int(self.created_at * 1000)),
                    "partition_count": int32(n),
                    "partition_ids": Array(UNDESCRIBED, Data.STRING, *[str(i) for i in range(n)])}
        elif kind == "com.microsoft:partition":
            pid = str(props.get("partition"))
            if not pid.isdigit() or int(pid) >= n:
                self._reply(c, "$management", msg, 404, f"The specified partition '{pid}' is invalid.")
                return
            with self._lock:
                last_seq = self._seq.get((hub, pid), 0) - 1
                last_time = self._last_enqueued.get((hub, pid), 0.0)
            body = {"name": hub, "type": "com.microsoft:partition", "partition": pid,
                    "begin_sequence_number": 0 if last_seq >= 0 else -1,
                    "last_enqueued_sequence_number": last_seq,
                    "last_enqueued_offset": str(max(last_seq, -1)),
                    "last_enqueued_time_utc": timestamp(int(last_time * 1000)),
                    "is_partition_empty": last_seq < 0}
        else:
            self._reply(c, "$management", msg, 400, f"Unsupported type {kind!r}.")
            return
        self._reply(c, "$management", msg, 200, "OK", body)

    def _on_hub_transfer(self, c: _Conn, d: Delivery, data: bytes, fmt: int, hub: str,
                         partition: str | None) -> None:
        with self._lock:
            self.stats["transfers"] += 1
            if self._drop_next > 0:
                self._drop_next -= 1
                drop = True
            else:
                drop = False
            reject = None
            if not drop and self._reject:
                remaining, cond, desc = self._reject[0]
                reject = (cond, desc)
                if remaining <= 1:
                    self._reject.pop(0)
                else:
                    self._reject[0] = (remaining - 1, cond, desc)
            limit = self.max_message_size
            delay = self._accept_delay
        if drop:
            self._close(c, dropped=True)
            return
        if reject is not None:
            self.stats["rejected"] += 1
            self._finish(c, d, delay, Delivery.REJECTED, *reject)
            return
        if len(data) > limit:
            self.stats["rejected"] += 1
            self._finish(c, d, delay, Delivery.REJECTED, MESSAGE_SIZE_EXCEEDED,
                         f"The received message (size: {len(data)} bytes) exceeds the limit "
                         f"({limit} bytes) currently allowed on the link.")
            return
        try:
            messages, outer_key = self._unpack(data, fmt)
        except Exception as exc:  # noqa: BLE001 - anything undecodable is the client's fault
            self.stats["rejected"] += 1
            self._finish(c, d, delay, Delivery.REJECTED, "amqp:decode-error",
                         f"The message could not be decoded: {exc}")
            return
        self._finish(c, d, delay, Delivery.ACCEPTED, None, None,
                     lambda: self._store(c, hub, partition, messages, outer_key))

    def _finish(self, c: _Conn, d: Delivery, delay: float, state: int, condition: str | None,
                description: str | None, on_accept: Callable[[], None] | None = None) -> None:
        def done() -> None:
            if c.closed:
                return
            if on_accept is not None:
                on_accept()
                self.stats["accepted"] += 1
            self._settle(d, state, condition, description)
            self._pump(c)

        if delay > 0:
            self._schedule(delay, done)
        else:
            done()

    @staticmethod
    def _unpack(data: bytes, fmt: int) -> tuple[list[bytes], str | None]:
        """The encoded events in one transfer, and the batch's partition key."""
        if fmt != amqp_frames.BATCH_MESSAGE_FORMAT:
            key = _message_sections(data)["annotations"].get(PARTITION_KEY)
            return [bytes(data)], None if key is None else str(key)
        key = None
        events: list[bytes] = []
        for code, raw in amqp_frames.split_sections(data):
            if code == 0x75:
                events.append(bytes(amqp_frames.data_section_bytes(raw)))
            elif code == 0x72:
                value = amqp_frames.decode(raw, 1)[0]  # skip the section's 0x00, keep the map
                if isinstance(value, amqp_frames.Described) and isinstance(value.value, dict):
                    key = value.value.get(PARTITION_KEY)
        if key is None and events:
            key = _message_sections(events[0])["annotations"].get(PARTITION_KEY)
        return events, None if key is None else str(key)

    def _store(self, c: _Conn, hub: str, partition: str | None, events: list[bytes],
               key: str | None) -> None:
        n = self.hubs[hub]
        now = time.time()
        with self._lock:
            if partition is None:
                if key is not None:
                    partition = str(partition_for_key(key, n))
                else:  # a batch without key goes, whole, to one partition
                    partition = str(self._rr.get(hub, 0) % n)
                    self._rr[hub] = self._rr.get(hub, 0) + 1
            seq = self._seq.get((hub, partition), 0)
            self._events.extend(ReceivedEvent(hub, partition, seq + i, now, raw, c.id, key)
                                for i, raw in enumerate(events))
            self._seq[(hub, partition)] = seq + len(events)
            self._last_enqueued[(hub, partition)] = now
            self._lock.notify_all()


def _body_bytes(m: dict[str, Any]) -> bytes:
    if m["data"]:
        return b"".join(m["data"])
    v = m["value"]
    if v is None or isinstance(v, bytes):
        return v or b""
    return (v if isinstance(v, str) else repr(v)).encode("utf-8")


def _message_sections(payload: bytes | memoryview) -> dict[str, Any]:
    """Decode an AMQP message's sections: annotations (str keys), properties (13 fields),
    application properties, data sections (bytes) and, for a body that is not Data, the value."""
    out: dict[str, Any] = {"annotations": {}, "properties": [None] * 13,
                           "application_properties": {}, "data": [], "value": None}
    for code, value, _raw in amqp_frames.sections(payload):
        if isinstance(value, amqp_frames.Described):
            value = value.value
        if code == 0x72 and isinstance(value, dict):
            out["annotations"] = {str(k): v for k, v in value.items()}
        elif code == 0x73 and isinstance(value, list):
            out["properties"] = (value + [None] * 13)[:13]
        elif code == 0x74 and isinstance(value, dict):
            out["application_properties"] = {str(k): v for k, v in value.items()}
        elif code == 0x75:
            out["data"].append(bytes(value))
        elif code in (0x76, 0x77):
            out["value"] = value
    return out


__all__ = [
    "DEFAULT_MAX_MESSAGE_SIZE",
    "MESSAGE_SIZE_EXCEEDED",
    "SERVER_BUSY",
    "UNAUTHORIZED",
    "EventHubsStandIn",
    "ReceivedEvent",
    "make_sas_token",
    "partition_for_key",
]


def main(argv: list[str] | None = None) -> int:
    """``python -m se_forwarder.standins.eventhubs``: run a stand-in until interrupted."""
    import argparse

    from se_forwarder.platform import signals

    from . import tls as tls_module

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=5672)
    ap.add_argument("--tls-dir", help="serve TLS with the certificates in (or generated into) DIR")
    ap.add_argument("--hub", action="append", default=[], metavar="NAME[:PARTITIONS]")
    ap.add_argument("--max-message-size", type=int, default=DEFAULT_MAX_MESSAGE_SIZE)
    ap.add_argument("--token-key-file", help="shared TokenAuthority key file (accept JWTs)")
    args = ap.parse_args(argv)
    hubs = {}
    for spec in args.hub or ["scheduled-events:4"]:
        name, _, n = spec.partition(":")
        hubs[name] = int(n or 4)
    standin = EventHubsStandIn(
        args.host, args.port, tls_module.generate(args.tls_dir) if args.tls_dir else None,
        hubs=hubs, max_message_size=args.max_message_size,
        token_authority=TokenAuthority.from_key_file(args.token_key_file)
        if args.token_key_file else None)
    with standin:
        for hub in hubs:
            print(f"{hub}: {standin.connection_string(hub)}", flush=True)
        signals.wait_for_stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
