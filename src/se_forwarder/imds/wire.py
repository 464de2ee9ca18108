"""One keep-alive HTTP/1.1 connection to IMDS, read strictly (client.py says why it is written
out): a request out, its answer in, all of it before a deadline."""

from __future__ import annotations

import contextlib
import math
import re
import select
import socket
from typing import NoReturn

from ..clock import Clock
from ..errors import ImdsError

# An answer larger than this is refused (a document naming every VM of a large scale set is
# well under 1 MB; a 20 MB description must still be read, counted and cut, not fail the poll).
MAX_ANSWER_BYTES = 32 * 1024 * 1024
MAX_HEAD_BYTES = 64 * 1024  # the status line and the headers
MAX_HEADERS = 100
_STATUS = re.compile(rb"HTTP/1\.([01]) ([1-5][0-9][0-9])(?: [\t\x20-\x7e\x80-\xff]*)?")
_FIELD = rb"[!#$%&'*+.^_`|~0-9A-Za-z-]+:[\t\x20-\x7e\x80-\xff]*"  # name: value (no CR, LF, NUL)
_FIELDS = re.compile(rb"(?:" + _FIELD + rb"\r\n)*")  # every header line, checked at once
_ONE_FIELD = re.compile(_FIELD)
_HEAD = re.compile(_STATUS.pattern + rb"\r\n" + _FIELDS.pattern)  # all of it, in one match
# The headers that frame the body, in the lower-cased head (each header follows a CRLF).
_FRAMING = re.compile(
    rb"\r\n(content-length|transfer-encoding|connection):[ \t]*(.*?)[ \t]*(?=\r\n)"
)
_HEX = re.compile(rb"[0-9A-Fa-f]{1,8}")
_DIGITS = re.compile(rb"[0-9]{1,10}")


class Wire:
    """One connection: a request out, its answer in, strictly; all of it before ``deadline``
    (monotonic seconds). Raises ``TimeoutError``, ``OSError`` or ``ImdsError`` (not HTTP, too
    large, closed early); the caller then drops the connection."""

    def __init__(self, host: str, port: int, timeout: float, clock: Clock) -> None:
        self.clock = clock
        # An ASCII host is resolved as bytes: a str goes through the "idna" codec, whose import
        # (unicodedata, stringprep) would cost every VM 1.5 MB for the address 169.254.169.254.
        addr = host.encode("ascii") if host.isascii() else host
        # typeshed names str only; the socket module takes bytes too
        self.sock = socket.create_connection((addr, port), timeout)  # type: ignore[arg-type]
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        # Non-blocking, each wait done here: a socket with a timeout costs two more system
        # calls per read or write (the timeout set again, a poll before every call).
        self.sock.setblocking(False)
        self._poller: select.poll | None = None  # Windows has no poll
        if hasattr(select, "poll"):  # one system call, nothing built per wait
            self._poller = select.poll()
            self._poller.register(self.sock, select.POLLIN)
        self.buf = bytearray()
        self._last_head = b""  # the last head without its Date, and what it said
        self.date: bytes | None = None  # the last answer's Date (Azure's clock, azure_clock.py)
        self._last_framing: tuple[int, int | None, bool] = (0, None, False)

    def exchange(self, request: bytes, deadline: float) -> tuple[int, bytes, bool]:
        """(status, body, whether the connection may be used again)."""
        try:
            sent = self.sock.send(request)  # at once: the socket's buffer is empty between answers
        except BlockingIOError:
            sent = 0
        if sent < len(request):
            self._send(memoryview(request)[sent:], deadline)
        for _ in range(8):  # interim answers (100 Continue, 103 Early Hints) come first
            status, length, keep = self._head(deadline)
            if status >= 200:
                break
        else:
            raise ImdsError("bad answer: too many interim answers")
        if status in (204, 304) or request.startswith(b"HEAD "):
            body = b""
        elif length is None:  # chunked
            body = self._chunked(deadline)
        elif length >= 0:
            body = self._take(length, deadline)
        else:  # no length: the body ends when the connection does
            while len(self.buf) <= MAX_ANSWER_BYTES and self._fill(deadline, eof_ok=True):
                pass
            if len(self.buf) > MAX_ANSWER_BYTES:
                raise ImdsError(f"answer too large: over {MAX_ANSWER_BYTES} bytes")
            body, keep = bytes(self.buf), False
            self.buf.clear()
        if self.buf:  # bytes nobody asked for: do not read the next answer from them
            keep = False
        return status, body, keep

    def _head(self, deadline: float) -> tuple[int, int | None, bool]:
        """The status line and headers: (status, body length (None: chunked, -1: until the
        connection closes), keep-alive)."""
        end = self.buf.find(b"\r\n\r\n")
        while end < 0 and len(self.buf) <= MAX_HEAD_BYTES:
            self._fill(deadline, first=not self.buf)
            end = self.buf.find(b"\r\n\r\n")
        if end < 0 or end > MAX_HEAD_BYTES:
            raise ImdsError("bad answer: headers too large")
        head = bytes(self.buf[: end + 2])  # the status line and each header, ending in CRLF
        del self.buf[: end + 4]
        # An unchanged document comes with the same head but for its Date: what that head said
        # is known (checking it costs more than the rest of an unchanged poll, bench/poll_cost).
        key, self.date = _undated(head)
        if key == self._last_head:
            return self._last_framing
        framing = _framing(head)
        self._last_head, self._last_framing = key, framing
        return framing

    def _chunked(self, deadline: float) -> bytes:
        body = bytearray()
        while True:
            size_line = self._line(deadline)
            size = _HEX.fullmatch(size_line.split(b";", 1)[0].strip())
            if size is None:
                raise ImdsError(f"bad answer: chunk size {size_line[:20]!r}")
            n = int(size[0], 16)
            if n == 0:
                while self._line(deadline):  # trailers, up to the empty line
                    pass
                return bytes(body)
            if len(body) + n > MAX_ANSWER_BYTES:
                raise ImdsError(f"answer too large: over {MAX_ANSWER_BYTES} bytes")
            body += self._take(n, deadline)
            if self._line(deadline):
                raise ImdsError("bad answer: chunk longer than its size")

    def _line(self, deadline: float) -> bytes:
        end = self.buf.find(b"\r\n")
        while end < 0:
            if len(self.buf) > MAX_HEAD_BYTES:
                raise ImdsError("bad answer: line too long")
            self._fill(deadline)
            end = self.buf.find(b"\r\n")
        line = bytes(self.buf[:end])
        del self.buf[: end + 2]
        return line

    def _take(self, n: int, deadline: float) -> bytes:
        while len(self.buf) < n:
            self._fill(deadline)
        data = bytes(self.buf[:n])
        del self.buf[:n]
        return data

    def _fill(self, deadline: float, *, first: bool = False, eof_ok: bool = False) -> bool:
        """Read what has arrived (waiting at most until ``deadline``); False at the end of the
        connection when ``eof_ok``."""
        while True:
            left = deadline - self.clock.monotonic()  # the answer is seldom there yet: wait first
            if left <= 0 or not self._readable(left):
                raise TimeoutError
            try:
                data = self.sock.recv(65536)
                break
            except BlockingIOError:  # woken for nothing
                continue
        if not data:
            if eof_ok:
                return False
            raise ImdsError(
                "connection closed without an answer"
                if first
                else "connection closed in the middle of the answer"
            )
        if len(self.buf) + len(data) > MAX_ANSWER_BYTES + MAX_HEAD_BYTES:
            raise ImdsError(f"answer too large: over {MAX_ANSWER_BYTES} bytes")
        self.buf += data
        return True

    def _send(self, view: memoryview, deadline: float) -> None:
        while view:
            left = deadline - self.clock.monotonic()
            if left <= 0 or not self._ready(left, write=True):
                raise TimeoutError
            try:
                view = view[self.sock.send(view) :]
            except BlockingIOError:
                continue

    def _readable(self, seconds: float) -> bool:
        """Ready to read (or failed: ``recv`` tells) within ``seconds``."""
        if self._poller is not None:
            return bool(self._poller.poll(math.ceil(seconds * 1000)))
        return self._ready(seconds, write=False)

    def _ready(self, seconds: float, *, write: bool) -> bool:
        """The slow way (a full send buffer; Windows, which has no ``poll``)."""
        if hasattr(select, "poll"):
            poller = select.poll()
            poller.register(self.sock, select.POLLOUT if write else select.POLLIN)
            return bool(poller.poll(math.ceil(seconds * 1000)))
        r, w, x = select.select(
            [] if write else [self.sock], [self.sock] if write else [], [self.sock], seconds
        )
        return bool(r or w or x)

    def shutdown(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self.sock.close()


def _undated(head: bytes) -> tuple[bytes, bytes | None]:
    """``head`` without its ``Date`` line when that line is a well-formed field (else as it is:
    the full check then refuses it), and that Date's value."""
    i = head.find(b"\r\nDate: ")
    if i < 0:
        return head, None
    j = head.find(b"\r\n", i + 2)
    if not _ONE_FIELD.fullmatch(head, i + 2, j):
        return head, None
    return head[:i] + head[j:], head[i + 8 : j].strip()


def _framing(head: bytes) -> tuple[int, int | None, bool]:
    """What a head (status line and header fields, each ending in CRLF) says of the body:
    (status, body length (None: chunked, -1: until the connection closes), keep-alive)."""
    status_line = _HEAD.fullmatch(head)
    eol = head.find(b"\r\n")
    if status_line is None:
        _refuse(head, eol)
    if head.count(b"\r\n") > MAX_HEADERS:
        raise ImdsError("bad answer: too many headers")
    keep = status_line[1] == b"1"
    length: int | None = -1
    lengths, chunked = set(), False
    for name, value in _FRAMING.findall(head.lower(), eol):
        if name == b"content-length":
            if not _DIGITS.fullmatch(value):
                raise ImdsError(f"bad answer: Content-Length {value[:20]!r}")
            lengths.add(int(value))
        elif name == b"transfer-encoding":
            if value != b"chunked":
                raise ImdsError(f"bad answer: Transfer-Encoding {value[:40]!r}")
            chunked = True
        else:  # connection
            tokens = {t.strip() for t in value.split(b",")}
            keep = b"close" not in tokens and (keep or b"keep-alive" in tokens)
    if len(lengths) > 1 or (lengths and chunked):
        raise ImdsError("bad answer: conflicting body lengths")
    if chunked:
        length = None
    elif lengths:
        length = lengths.pop()
        if length > MAX_ANSWER_BYTES:
            raise ImdsError(f"answer too large: {length} bytes (at most {MAX_ANSWER_BYTES})")
    return int(status_line[2]), length, keep


def _refuse(head: bytes, eol: int) -> NoReturn:
    """The error for a head that is not a status line and header fields."""
    if not _STATUS.fullmatch(head, 0, eol):
        raise ImdsError(f"bad answer: status line {head[: min(eol, 60)]!r}")
    bad = next((ln for ln in head[eol + 2 :].split(b"\r\n") if not _ONE_FIELD.fullmatch(ln)), b"")
    raise ImdsError(f"bad answer: header {bad[:60]!r}")
