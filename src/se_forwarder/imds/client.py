"""HTTP to the Instance Metadata Service.

Built on one persistent ``http.client`` connection: it never reads ``HTTP_PROXY``/``NO_PROXY``
(IMDS must be reached directly, whatever the VM's proxy settings) and costs about 0.5 ms of CPU
per request on loopback against 1.2 ms for ``httpx.Client`` (measured in ``bench/poll_cost``),
which matters for an agent polling every second on every VM of a fleet.

Every answer is bounded (as every peer's, docs/architecture.md): one deadline for the whole
answer, headers included (a body or headers trickled a byte at a time end there, not at a
timeout per read), and at most ``MAX_ANSWER_BYTES`` read: far above any real document (tens of
KB with many events; one with a 20 MB Description is still read, its values then truncated by
the parser), far below what would hurt the VM.
"""

from __future__ import annotations

import http.client
import json
import socket
import threading
from collections import deque
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from ..clock import SYSTEM, Clock
from ..errors import ImdsError

# Answers that a later attempt may turn into a 200 (the caller decides when to try again).
RETRY_STATUSES = frozenset({410, 429, 500, 502, 503, 504})
MAX_ANSWER_BYTES = 32 * 1024 * 1024


class _Deadline:
    """When the answer being read must be over (the client's clock, monotonic seconds)."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.at = 0.0

    def left(self) -> float:
        left = self.at - self.clock.monotonic()
        if left <= 0:
            raise TimeoutError("timed out")
        return left


class _DeadlineSocket(socket.socket):
    """A socket whose every read waits at most until the request's deadline (``http.client``
    reads an answer, headers and body, through ``recv_into``)."""

    deadline: _Deadline

    def recv_into(self, buffer: Any, nbytes: int = 0, flags: int = 0) -> int:
        self.settimeout(self.deadline.left())
        return super().recv_into(buffer, nbytes, flags)


class _Connection(http.client.HTTPConnection):
    """``HTTPConnection`` whose socket reads end at one deadline per request."""

    def __init__(self, host: str, port: int, timeout: float, deadline: _Deadline) -> None:
        super().__init__(host, port, timeout=timeout)
        self.deadline = deadline

    def connect(self) -> None:
        super().connect()
        plain = self.sock
        sock = _DeadlineSocket(plain.family, plain.type, plain.proto, fileno=plain.detach())
        sock.settimeout(self.timeout)
        sock.deadline = self.deadline
        self.sock = sock


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
        if parts.scheme != "http" or not parts.hostname:
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
        self._conn: _Connection | None = None
        self._deadline = _Deadline(clock)
        # The first Scheduled Events call enables the feature and may take up to 2 minutes: the
        # long timeout applies until the endpoint has answered once, with anything.
        self._enabled = False
        self._events_path = f"/metadata/scheduledevents?api-version={api_version}"
        self._headers = {"Metadata": "true"}

    # -- public API ---------------------------------------------------------------------------

    def scheduled_events(self) -> Answer:
        """GET the Scheduled Events document: one attempt. A failure is the caller's to count and
        retry at its next tick (polling keeps its cadence; retrying here hid faults for minutes)."""
        return self._request("GET", self._events_path, None)

    def instance(self, api_version: str = "2021-02-01") -> dict[str, Any]:
        """The instance document (one attempt); raises ``ImdsError`` when it cannot be had."""
        answer = self._request("GET", f"/metadata/instance?api-version={api_version}", None)
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
        return self._request("POST", self._events_path, body)

    def abort(self) -> None:
        """Cut an in-flight request short (safe from a signal handler or another thread): the
        blocked read returns at once and the request reports an error."""
        conn = self._conn
        sock = conn.sock if conn is not None else None
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    # -- internals ----------------------------------------------------------------------------

    def _request(self, method: str, path: str, body: bytes | None) -> Answer:
        wait = self.limiter.reserve()
        while wait > 0:
            if self.clock.wait(self.stop, wait):
                return Answer(None, b"", 0.0, "stopped")
            wait = self.limiter.reserve()
        slow_first = path == self._events_path and not self._enabled
        timeout = self.first_call_timeout if slow_first else self.timeout
        t0 = self.clock.monotonic()
        self._deadline.at = t0 + timeout
        try:
            conn = self._conn
            if conn is None:
                conn = self._conn = _Connection(self.host, self.port, timeout, self._deadline)
            elif conn.sock is not None and conn.sock.gettimeout() != timeout:
                conn.sock.settimeout(timeout)
            headers = self._headers if body is None else {**self._headers, "Content-Type": "application/json"}
            conn.request(method, path, body=body, headers=headers)
            resp = conn.getresponse()
            data = resp.read(MAX_ANSWER_BYTES + 1)
            if len(data) > MAX_ANSWER_BYTES or resp.will_close:
                self.close()  # the rest of an answer too large is never read
        except TimeoutError:
            self.close()
            return Answer(None, b"", (self.clock.monotonic() - t0) * 1000, f"timeout after {timeout:g} s")
        except (OSError, http.client.HTTPException) as exc:
            self.close()
            return Answer(None, b"", (self.clock.monotonic() - t0) * 1000, _describe_error(exc))
        if slow_first:
            self._enabled = True
        latency = (self.clock.monotonic() - t0) * 1000
        if len(data) > MAX_ANSWER_BYTES:
            return Answer(None, b"", latency, f"answer over {MAX_ANSWER_BYTES >> 20} MiB "
                                              f"(HTTP {resp.status}): not read")
        return Answer(resp.status, data, latency)


def _describe_error(exc: BaseException) -> str:
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused"
    if isinstance(exc, http.client.RemoteDisconnected):
        return "connection closed without an answer"
    name = type(exc).__name__
    text = str(exc)
    return f"{name}: {text}" if text else name
