"""HTTP to the Instance Metadata Service, on one keep-alive socket.

IMDS is plain HTTP/1.1 on a link-local address, and an agent polling it every second on every VM
of a fleet pays for each request: ``http.client`` parses every answer's headers through the
``email`` package and builds each request header by header (0.39 ms of CPU per poll on
loopback, against 0.18 ms for the request written here; ``bench/poll_cost``). So the exchange is
written out (``Wire``): one pre-built request, the answer read strictly — the status line,
``Content-Length`` or ``chunked``, at most ``MAX_ANSWER_BYTES``, all of it within the request's
timeout (a deadline, not a per-read timeout) — and anything else is an error, never a guess.
The socket is non-blocking and each wait is one ``poll`` (a socket timeout costs two more system
calls per read), and what a head said is kept: the next answer of an unchanged document comes
with the same head but for its Date, and is not checked again.
A socket never reads ``HTTP_PROXY``/``NO_PROXY``: IMDS is reached directly, whatever the VM's
proxy settings.
"""

from __future__ import annotations

import bisect
import json
import math
import re
import threading
from collections import deque
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from ..clock import SYSTEM, Clock
from ..errors import ImdsError
from .wire import Wire

# Answers that a later attempt may turn into a 200 (the caller decides when to try again).
RETRY_STATUSES = frozenset({410, 429, 500, 502, 503, 504})


@dataclass(frozen=True, slots=True)
class ImdsReply:
    """One request's outcome: a status and body, or an error (no answer at all)."""

    status: int | None
    body: bytes
    latency_ms: float
    error: str | None = None  # "timeout", "connection refused: ...", ...
    date: bytes | None = None  # the answer's Date header: Azure's clock (azure_clock.py)

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

    def reserve(self) -> tuple[float, float]:
        """Take a slot if one is free now: (0.0, the slot, for ``settle``); else (the seconds to
        wait before asking again, NaN). One step, so two threads sharing the budget never both
        take the last slot."""
        with self._lock:
            now = self.clock.monotonic()
            wait = self._delay(now)
            if wait > 0:
                return wait, math.nan
            self._sent.append(now)
            return 0.0, now

    def settle(self, slot: float) -> None:
        """Count a slot from when its answer came back: on a busy VM a request can reach IMDS
        well after it was sent, and IMDS counts arrivals; an arrival is never later than its
        answer, so a window measured from the answer holds however late the request was."""
        with self._lock:
            try:
                self._sent.remove(slot)
            except ValueError:  # already out of the window
                return
            bisect.insort(self._sent, self.clock.monotonic())


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
        self._wire: Wire | None = None
        # The first Scheduled Events call enables the feature and may take up to 2 minutes: the
        # long timeout applies until the endpoint has answered once, with anything.
        self._enabled = False
        self._events_path = f"/metadata/scheduledevents?api-version={api_version}"
        name = f"[{self.host}]" if ":" in self.host else self.host
        self._host_header = name if self.port == 80 else f"{name}:{self.port}"
        self._poll = self._build("GET", self._events_path, None)  # the same bytes every second

    # -- public API ---------------------------------------------------------------------------

    def scheduled_events(self) -> ImdsReply:
        """GET the Scheduled Events document: one attempt. A failure is the caller's to count and
        retry at its next tick (polling keeps its cadence; retrying here hid faults for minutes)."""
        return self._request(self._poll, slow_first=not self._enabled)

    def instance(self, api_version: str = "2021-02-01") -> dict[str, Any]:
        """The instance document (one attempt); raises ``ImdsError`` when it cannot be had."""
        answer = self._request(
            self._build("GET", f"/metadata/instance?api-version={api_version}", None)
        )
        if not answer.ok:
            raise ImdsError(f"instance document: {answer.describe()}")
        try:
            data = json.loads(answer.body)
        except ValueError as exc:
            raise ImdsError(f"instance document is not JSON: {exc}") from None
        if not isinstance(data, dict):
            raise ImdsError("instance document is not a JSON object")
        return data

    def approve(self, event_ids: list[str]) -> ImdsReply:
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

    def _request(self, request: bytes, *, slow_first: bool = False) -> ImdsReply:
        wait, slot = self.limiter.reserve()
        while wait > 0:
            if self.clock.wait(self.stop, wait):
                return ImdsReply(None, b"", 0.0, "stopped")
            wait, slot = self.limiter.reserve()
        try:
            return self._exchange(request, slow_first)
        finally:
            self.limiter.settle(slot)

    def _exchange(self, request: bytes, slow_first: bool) -> ImdsReply:
        timeout = self.first_call_timeout if slow_first else self.timeout
        clock = self.clock
        t0 = clock.monotonic()
        try:
            wire = self._wire
            if wire is None:
                wire = self._wire = Wire(self.host, self.port, timeout, clock)
            status, data, keep = wire.exchange(request, t0 + timeout)
        except TimeoutError:
            self.close()
            return ImdsReply(
                None, b"", (clock.monotonic() - t0) * 1000, f"timeout after {timeout:g} s"
            )
        except (OSError, ImdsError) as exc:
            self.close()
            return ImdsReply(None, b"", (clock.monotonic() - t0) * 1000, _describe_error(exc))
        if not keep:
            self.close()
        if slow_first:
            self._enabled = True
        return ImdsReply(status, data, (clock.monotonic() - t0) * 1000, date=wire.date)


_PATH = re.compile(r"/[!-~]*")  # printable ASCII, no space: nothing can end the request line


def _describe_error(exc: BaseException) -> str:
    if isinstance(exc, ImdsError):
        return str(exc)
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused"
    name = type(exc).__name__
    text = str(exc)
    return f"{name}: {text}" if text else name
