"""One client connection: its socket, TLS over memory BIOs, proton's engine and what the
connection has earned (grants, links); and the moves of bytes between them."""

from __future__ import annotations

import itertools
import socket
import ssl
from collections.abc import Callable
from dataclasses import dataclass, field

from proton import Collector, Connection, Link, Transport, TransportException

from .. import amqp_frames
from .auth import Grant

_MAX_FRAME = 65536
_CHANNEL_MAX = 4999
_CHUNK = 262144
# A hostile peer's modes (``EventHubsStandIn.hostile_next``): "silent" completes TLS, then never
# answers; "huge-frame" answers the protocol header with a frame announcing 2 GiB and sends
# HUGE_FRAME_SENT bytes of it (a client that trusts the size allocates it at the header).
HOSTILE_MODES = ("silent", "huge-frame")
HUGE_FRAME = 0x7FFFFFF0
HUGE_FRAME_SENT = 4 * 1024 * 1024


class ConnectionLost(Exception):
    """The socket, the TLS layer or the peer's frames failed: the connection is to be closed."""


class TlsLayer:
    """Server-side TLS over memory BIOs: raw bytes in and out, plain AMQP to proton."""

    def __init__(self, context: ssl.SSLContext) -> None:
        self._in, self._out = ssl.MemoryBIO(), ssl.MemoryBIO()
        self._obj = context.wrap_bio(self._in, self._out, server_side=True)
        self._ready = False
        self._pending_plain = bytearray()
        self.eof = False

    def receive(self, raw: bytes) -> bytes:
        """Take bytes from the wire (b"": the peer closed); return the plain bytes they complete."""
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
                chunk = self._obj.read(_CHUNK)
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


@dataclass
class Conn:
    """A client connection and what it has earned: its grants, and its links by purpose."""

    id: int
    sock: socket.socket
    transport: Transport
    connection: Connection
    collector: Collector
    tls: TlsLayer | None
    padder: amqp_frames.OutboundPadder = field(default_factory=amqp_frames.OutboundPadder)
    scanner: amqp_frames.InboundScanner = field(default_factory=amqp_frames.InboundScanner)
    outbuf: bytearray = field(default_factory=bytearray)
    inbuf: bytearray = field(default_factory=bytearray)
    grants: list[Grant] = field(default_factory=list)
    reply_links: dict[str, Link] = field(default_factory=dict)  # "$cbs"/"$management" -> our sender
    hub_links: dict[str, tuple[str, str | None]] = field(
        default_factory=dict
    )  # link name -> hub, partition
    closed: bool = False
    tag_seq: itertools.count[int] = field(default_factory=itertools.count)
    hostile: str | None = None  # one of HOSTILE_MODES: served as a hostile peer, never by proton
    hostile_answered: bool = False

    @classmethod
    def accept(cls, conn_id: int, sock: socket.socket, ssl_ctx: ssl.SSLContext | None) -> Conn:
        """A server-side proton engine (SASL ANONYMOUS) bound to a freshly accepted socket."""
        sock.setblocking(False)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        transport = Transport(Transport.SERVER)
        transport.max_frame_size = _MAX_FRAME
        transport.channel_max = _CHANNEL_MAX
        transport.sasl().allowed_mechs("ANONYMOUS")
        connection = Connection()
        collector = Collector()
        connection.collect(collector)
        transport.bind(connection)
        return cls(
            conn_id, sock, transport, connection, collector, TlsLayer(ssl_ctx) if ssl_ctx else None
        )

    def hostile_input(self, plain: bytes) -> None:
        """As a hostile peer: "silent" swallows everything; "huge-frame" answers the first
        protocol header with the oversized frame, then swallows the rest."""
        if self.hostile == "huge-frame" and not self.hostile_answered and len(plain) >= 8:
            self.hostile_answered = True
            frame = HUGE_FRAME.to_bytes(4, "big") + bytes([2, 1, 0, 0])
            answer = bytes(plain[:8]) + frame + bytes(HUGE_FRAME_SENT)
            if self.tls is not None:
                self.tls.send(answer)
            else:
                self.outbuf += answer
        if self.tls is not None:
            self.outbuf += self.tls.outgoing()

    def receive(self) -> bool | None:
        """Read what the socket holds into ``inbuf`` (through TLS, past the frame scanner).

        Returns whether the peer ended its stream, None when there was nothing to read; raises
        ConnectionLost when the socket, TLS or the frames fail."""
        try:
            raw = self.sock.recv(_CHUNK)
        except (BlockingIOError, InterruptedError):
            return None
        except OSError as exc:
            raise ConnectionLost from exc
        if self.tls is not None:
            try:
                plain = self.tls.receive(raw)
            except ssl.SSLError as exc:
                raise ConnectionLost from exc
            eof = not raw or self.tls.eof
        else:
            plain, eof = raw, not raw
        if self.hostile is not None:
            self.hostile_input(plain)
            return eof
        if plain:
            try:
                self.scanner.feed(plain)
            except ValueError as exc:
                raise ConnectionLost from exc
            self.inbuf += plain
        return eof

    def push_input(self, process: Callable[[Conn], None]) -> None:
        """Give ``inbuf`` to proton as far as it takes it, with ``process`` after each chunk."""
        while self.inbuf and not self.closed:
            cap = self.transport.capacity()
            if cap <= 0:
                if cap < 0:
                    self.inbuf.clear()
                break
            chunk = bytes(self.inbuf[:cap])
            del self.inbuf[:cap]
            try:
                self.transport.push(chunk)
            except TransportException:  # a protocol error: proton closes the connection
                self.inbuf.clear()
                break
            process(self)

    def take_output(self) -> None:
        """Move proton's output, each performative padded, through TLS into ``outbuf``."""
        while True:
            pending = self.transport.pending()
            if pending <= 0:
                break
            out = self.transport.peek(pending) or b""
            self.transport.pop(pending)
            padded = self.padder.feed(out)
            if self.tls is not None:
                self.tls.send(padded)
            else:
                self.outbuf += padded
        if self.tls is not None:
            self.outbuf += self.tls.outgoing()

    def flush(self) -> bool:
        """Send ``outbuf`` as far as the socket takes it; False when the socket failed."""
        while self.outbuf:
            try:
                n = self.sock.send(self.outbuf)
            except (BlockingIOError, InterruptedError):
                break
            except OSError:
                return False
            del self.outbuf[:n]
        return True
