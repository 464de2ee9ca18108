"""HTTP to the Instance Metadata Service, on one keep-alive socket.

IMDS is plain HTTP/1.1 on a link-local address, and an agent polling it every second on every VM
of a fleet pays for each request: ``http.client`` parses every answer's headers through the
``email`` package and builds each request header by header (0.39 ms of CPU per poll on
loopback, against 0.18 ms for the request written here; ``bench/poll_cost``). So the exchange is
written out (``_Wire``): one pre-built request, the answer read strictly — the status line,
``Content-Length`` or ``chunked``, at most ``MAX_ANSWER_BYTES``, all of it within the request's
timeout (a deadline, not a per-read timeout) — and anything else is an error, never a guess.
The socket is non-blocking and each wait is one ``poll`` (a socket timeout costs two more system
calls per read), and what a head said is kept: the next answer of an unchanged document comes
with the same head but for its Date, and is not checked again.
A socket never reads ``HTTP_PROXY``/``NO_PROXY``: IMDS is reached directly, whatever the VM's
proxy settings.
"""

from __future__ import annotations

import json
import math
import re
import select
import socket
import threading
from collections import deque
from dataclasses import dataclass
from typing import Any, NoReturn
from urllib.parse import urlsplit

from ..clock import SYSTEM, Clock
from ..errors import ImdsError

# Answers that a later attempt may turn into a 200 (the caller decides when to try again).
RETRY_STATUSES = frozenset({410, 429, 500, 502, 503, 504})
# An answer larger than this is refused (a document naming every VM of a large scale set is
# well under 1 MB; a 20 MB description must still be read, counted and cut, not fail the poll).
MAX_ANSWER_BYTES = 32 * 1024 * 1024
MAX_HEAD_BYTES = 64 * 1024  # the status line and the headers
MAX_HEADERS = 100


@dataclass(frozen=True, slots=True)
class Answer:
    """One request's outcome: a status and body, or an error (no answer at all)."""

    status: int | None
    body: bytes
    latency_ms: float
    error: str | None = None  # "timeout", "connection refused: ...", ...

    @property
    def ok(self) -> bool:
        return self.status == 200

    def describe(self) -> str:
        if self.error:
            return self.error
        snippet = self.body[:120].decode("utf-8", "replace").replace("\n", " ")
        return f"HTTP {self.status}" + (f": {snippet}" if snippet and self.status != 200 else "")


class RateLimiter:
    """At most ``rate`` requests in any one-second window (IMDS's budget, shared on the VM).

    The window is kept ``margin`` longer than a second: IMDS counts arrivals, and a request sent
    exactly one second after another may arrive a hair inside the same window.
    """

    margin = 0.02

    def __init__(self, rate: int, clock: Clock = SYSTEM) -> None:
        self.rate = rate
        self.clock = clock
        self._sent: deque[float] = deque()
        self._lock = threading.Lock()  # shared by the poll loop's client and the approvals'

    def delay(self) -> float:
        """Seconds to wait before the next request may go."""
        with self._lock:
            return self._delay(self.clock.monotonic())

    def _delay(self, now: float) -> float:
        window = 1.0 + self.margin
        while self._sent and now - self._sent[0] >= window:
            self._sent.popleft()
        return 0.0 if len(self._sent) < self.rate else window - (now - self._sent[0])

    def record(self) -> None:
        with self._lock:
            self._sent.append(self.clock.monotonic())

    def reserve(self) -> float:
        """Take a slot if one is free now (returns 0.0), else the seconds to wait before asking
        again: one step, so two threads sharing the budget never both take the last slot."""
        with self._lock:
            now = self.clock.monotonic()
            wait = self._delay(now)
            if wait <= 0:
                self._sent.append(now)
            return wait


class ImdsClient:
    """Scheduled Events, the instance document and approvals, over one keep-alive connection."""

    def __init__(
        self,
        endpoint: str = "http://169.254.169.254",
        *,
        api_version: str = "2020-07-01",
        timeout: float = 2.0,
        first_call_timeout: float = 120.0,
        max_requests_per_second: int = 5,
        stop: threading.Event | None = None,
        limiter: RateLimiter | None = None,
        clock: Clock = SYSTEM,
    ) -> None:
        parts = urlsplit(endpoint)
        if parts.scheme != "http" or not parts.hostname or parts.path.strip("/"):
            raise ValueError(f"IMDS endpoint must be http://host[:port], got {endpoint!r}")
        self.host = parts.hostname
        self.port = parts.port or 80
        self.api_version = api_version
        self.timeout = timeout
        self.first_call_timeout = first_call_timeout
        # One budget per VM: a second client (approvals) passes the poll loop's limiter.
        self.clock = clock
        self.limiter = limiter or RateLimiter(max_requests_per_second, clock)
        self.stop = stop or clock.event()
        self._wire: _Wire | None = None
        # The first Scheduled Events call enables the feature and may take up to 2 minutes: the
        # long timeout applies until the endpoint has answered once, with anything.
        self._enabled = False
        self._events_path = f"/metadata/scheduledevents?api-version={api_version}"
        name = f"[{self.host}]" if ":" in self.host else self.host
        self._host_header = name if self.port == 80 else f"{name}:{self.port}"
        self._poll = self._build("GET", self._events_path, None)  # the same bytes every second

    # -- public API ---------------------------------------------------------------------------

    def scheduled_events(self) -> Answer:
        """GET the Scheduled Events document: one attempt. A failure is the caller's to count and
        retry at its next tick (polling keeps its cadence; retrying here hid faults for minutes)."""
        return self._request(self._poll, slow_first=not self._enabled)

    def instance(self, api_version: str = "2021-02-01") -> dict[str, Any]:
        """The instance document (one attempt); raises ``ImdsError`` when it cannot be had."""
        answer = self._request(self._build("GET", f"/metadata/instance?api-version={api_version}",
                                           None))
        if not answer.ok:
            raise ImdsError(f"instance document: {answer.describe()}")
        try:
            data = json.loads(answer.body)
        except ValueError as exc:
            raise ImdsError(f"instance document is not JSON: {exc}") from None
        if not isinstance(data, dict):
            raise ImdsError("instance document is not a JSON object")
        return data

    def approve(self, event_ids: list[str]) -> Answer:
        """POST StartRequests for several events at once (200 = accepted). One attempt: the
        caller (``approvals``) retries with its own deadline, NotBefore."""
        body = json.dumps({"StartRequests": [{"EventId": e} for e in event_ids]}).encode()
        return self._request(self._build("POST", self._events_path, body))

    def abort(self) -> None:
        """Cut an in-flight request short (safe from a signal handler or another thread): the
        blocked read returns at once and the request reports an error."""
        wire = self._wire
        if wire is not None:
            wire.shutdown()

    def close(self) -> None:
        if self._wire is not None:
            self._wire.close()
            self._wire = None

    # -- internals ----------------------------------------------------------------------------

    def _build(self, method: str, path: str, body: bytes | None) -> bytes:
        if not _PATH.fullmatch(path):
            raise ValueError(f"not a request path: {path!r}")
        head = f"{method} {path} HTTP/1.1\r\nHost: {self._host_header}\r\nMetadata: true\r\n"
        if body is not None:
            head += f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
        return (head + "\r\n").encode("ascii") + (body or b"")

    def _request(self, request: bytes, *, slow_first: bool = False) -> Answer:
        wait = self.limiter.reserve()
        while wait > 0:
            if self.clock.wait(self.stop, wait):
                return Answer(None, b"", 0.0, "stopped")
            wait = self.limiter.reserve()
        timeout = self.first_call_timeout if slow_first else self.timeout
        clock = self.clock
        t0 = clock.monotonic()
        try:
            wire = self._wire
            if wire is None:
                wire = self._wire = _Wire(self.host, self.port, timeout, clock)
            status, data, keep = wire.exchange(request, t0 + timeout)
        except TimeoutError:
            self.close()
            return Answer(None, b"", (clock.monotonic() - t0) * 1000, f"timeout after {timeout:g} s")
        except (OSError, ImdsError) as exc:
            self.close()
            return Answer(None, b"", (clock.monotonic() - t0) * 1000, _describe_error(exc))
        if not keep:
            self.close()
        if slow_first:
            self._enabled = True
        return Answer(status, data, (clock.monotonic() - t0) * 1000)


_PATH = re.compile(r"/[!-~]*")  # printable ASCII, no space: nothing can end the request line
_STATUS = re.compile(rb"HTTP/1\.([01]) ([1-5][0-9][0-9])(?: [\t\x20-\x7e\x80-\xff]*)?")
_FIELD = rb"[!#$%&'*+.^_`|~0-9A-Za-z-]+:[\t\x20-\x7e\x80-\xff]*"  # name: value (no CR, LF, NUL)
_FIELDS = re.compile(rb"(?:" + _FIELD + rb"\r\n)*")  # every header line, checked at once
_ONE_FIELD = re.compile(_FIELD)
_HEAD = re.compile(_STATUS.pattern + rb"\r\n" + _FIELDS.pattern)  # all of it, in one match
# The headers that frame the body, in the lower-cased head (each header follows a CRLF).
_FRAMING = re.compile(rb"\r\n(content-length|transfer-encoding|connection):[ \t]*(.*?)[ \t]*(?=\r\n)")
_HEX = re.compile(rb"[0-9A-Fa-f]{1,8}")
_DIGITS = re.compile(rb"[0-9]{1,10}")


class _Wire:
    """One connection: a request out, its answer in, strictly; all of it before ``deadline``
    (monotonic seconds). Raises ``TimeoutError``, ``OSError`` or ``ImdsError`` (not HTTP, too
    large, closed early); the caller then drops the connection."""

    def __init__(self, host: str, port: int, timeout: float, clock: Clock) -> None:
        self.clock = clock
        # An ASCII host is resolved as bytes: a str goes through the "idna" codec, whose import
        # (unicodedata, stringprep) would cost every VM 1.5 MB for the address 169.254.169.254.
        addr = host.encode("ascii") if host.isascii() else host
        self.sock = socket.create_connection((addr, port), timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        # Non-blocking, each wait done here: a socket with a timeout costs two more system
        # calls per read or write (the timeout set again, a poll before every call).
        self.sock.setblocking(False)
        if hasattr(select, "poll"):  # one system call, nothing built per wait
            self._poller = select.poll()
            self._poller.register(self.sock, select.POLLIN)
        else:  # Windows
            self._poller = None
        self.buf = bytearray()
        self._last_head = b""  # the last head without its Date, and what it said
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
        head = bytes(self.buf[:end + 2])  # the status line and each header, ending in CRLF
        del self.buf[:end + 4]
        # An unchanged document comes with the same head but for its Date: what that head said
        # is known (checking it costs more than the rest of an unchanged poll, bench/poll_cost).
        key = _undated(head)
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
        del self.buf[:end + 2]
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
            raise ImdsError("connection closed without an answer" if first
                            else "connection closed in the middle of the answer")
        if len(self.buf) + len(data) > MAX_ANSWER_BYTES + MAX_HEAD_BYTES:
            raise ImdsError(f"answer too large: over {MAX_ANSWER_BYTES} bytes")
        self.buf += data
        return True

    def _send(self, view: memoryview, deadline: float) -> None:
        while view:
            left = deadline - self.clock.monotonic()
            if left <= 0 or not any(select.select([], [self.sock], [self.sock], left)):
                raise TimeoutError
            try:
                view = view[self.sock.send(view):]
            except BlockingIOError:
                continue

    def _readable(self, seconds: float) -> bool:
        """Ready to read (or failed: ``recv`` tells) within ``seconds``."""
        if self._poller is not None:
            return bool(self._poller.poll(math.ceil(seconds * 1000)))
        return any(select.select([self.sock], [], [self.sock], seconds))

    def shutdown(self) -> None:
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def close(self) -> None:
        self.sock.close()


def _undated(head: bytes) -> bytes:
    """``head`` without its ``Date`` line when that line is a well-formed field (else as it is:
    the full check then refuses it)."""
    i = head.find(b"\r\nDate: ")
    if i < 0:
        return head
    j = head.find(b"\r\n", i + 2)
    return head[:i] + head[j:] if _ONE_FIELD.fullmatch(head, i + 2, j) else head


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
        raise ImdsError(f"bad answer: status line {head[:min(eol, 60)]!r}")
    bad = next((ln for ln in head[eol + 2:].split(b"\r\n") if not _ONE_FIELD.fullmatch(ln)), b"")
    raise ImdsError(f"bad answer: header {bad[:60]!r}")


def _describe_error(exc: BaseException) -> str:
    if isinstance(exc, ImdsError):
        return str(exc)
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused"
    name = type(exc).__name__
    text = str(exc)
    return f"{name}: {text}" if text else name
