"""The IMDS simulator: a loopback HTTP/1.1 server that behaves like the Instance Metadata Service
for Scheduled Events, the instance document and managed-identity tokens.

It is held to the real service's rules (Metadata header, api-versions, X-Forwarded-For refusal, a
5 requests/s sliding-window throttle, stable EventIds, incarnations that move only on change,
RFC 1123 NotBefore) so the agent can be tested against it. Only the standard library is used at
run time; a clock thread publishes each new document at the exact moment the scenario says, and
the change log keeps that moment for latency measurements.
"""

from __future__ import annotations

import collections
import contextlib
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, Self

from se_forwarder.clock import SYSTEM, Clock

from ..standins.tokens import TokenAuthority
from .http_endpoints import HttpEndpoints, _Handler, _Server
from .scenario import FAULT_KINDS, Scenario, Timeline, load_scenario
from .tracescript import Observation, load_trace
from .wire import (
    LATEST,
    ChangeRecord,
    Fault,
    RateLimiter,
    RequestRecord,
    render_event,
    wire_from_mapping,
)


class _Server6(_Server):
    """The simulator on an IPv6 address."""

    address_family = socket.AF_INET6


class Simulator(HttpEndpoints):
    """A local IMDS. Drive it from a scenario, a trace, or by hand (``set_events``).

    ``speed`` divides scenario times (None: the scenario's own default). ``first_call_delay`` is
    in real seconds and overrides the scenario's. ``rate_limit`` is requests per sliding second
    over all ``/metadata/`` paths (None disables it). ``clock``: the scenario's time, the times
    of requests and changes and the rate limit follow it (a test's FakeClock: the document is
    brought up to date at each request; tokens and delays stay in real time).
    ``instance_status``: the instance document fails with it until the attribute is cleared.
    """

    def __init__(
        self,
        scenario: Scenario | str | Path | None = None,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        speed: float | None = None,
        token_authority: TokenAuthority | None = None,
        trace: str | Path | None = None,
        vm_name: str | None = None,
        first_call_delay: float | None = None,
        rate_limit: int | None = 5,
        hang_seconds: float = 3.0,
        clock: Clock = SYSTEM,
        instance_status: int | None = None,
    ) -> None:
        self.clock = clock
        if scenario is None:
            scenario = Scenario()
        elif not isinstance(scenario, Scenario):
            scenario = load_scenario(scenario)
        if vm_name:
            scenario = scenario.model_copy(
                update={"vm": scenario.vm.model_copy(update={"name": vm_name})}
            )
        self.scenario: Scenario = scenario
        self.speed = float(speed if speed is not None else scenario.speed)
        if self.speed <= 0:
            raise ValueError("speed must be positive")
        self.host = host
        self._port = port
        self.token_authority = token_authority or TokenAuthority()
        self.rate_limit = rate_limit
        self.hang_seconds = hang_seconds
        self.first_call_delay = (
            first_call_delay
            if first_call_delay is not None
            else scenario.first_call_delay / self.speed
        )
        self.trace: list[Observation] | None = load_trace(trace) if trace is not None else None
        # set: /metadata/instance answers this status (from the first request, when given here)
        self.instance_status: int | None = instance_status

        self._cond = threading.Condition()
        self._stopping = threading.Event()
        self._timelines = [
            Timeline(e, e.id or str(uuid.uuid4()), scenario.vm.name) for e in scenario.events
        ]
        self._manual = False
        self._incarnation = scenario.incarnation
        self._events: list[dict[str, Any]] = []
        self._approvals_scn: dict[str, float] = {}
        self._approvals_wall: dict[str, float] = {}
        self._faults: collections.deque[Fault] = collections.deque()
        self._approval_faults: collections.deque[int] = collections.deque()
        self._scenario_faults = sorted(scenario.faults, key=lambda f: f.at)
        self._faults_fired = 0
        self._trace_index = -1
        self._first_call_done = False
        self._limiter = RateLimiter(rate_limit) if rate_limit else None
        self._requests: list[RequestRecord] = []
        self._changes: list[ChangeRecord] = []
        self._conns: set[socket.socket] = set()
        self._server = None
        self._threads: list[threading.Thread] = []
        self._t0_mono = 0.0
        self._t0_wall = 0.0
        self._t_last = 0.0

    # -- lifecycle ------------------------------------------------------------------------

    def start(self) -> Simulator:
        """Bind, start serving and start the scenario clock (scenario time 0 is now)."""
        if self._server is not None:
            raise RuntimeError("simulator already started")
        if self._stopping.is_set():
            raise RuntimeError("a stopped simulator cannot start again; make a new one")
        handler = type("Handler", (_Handler,), {"sim": self})
        server_class: type[_Server] = _Server6 if ":" in self.host else _Server
        self._server = server_class((self.host, self._port), handler)
        self._port = self._server.server_address[1]
        if self.speed > 1 and self.clock is SYSTEM:
            # NotBefore has whole-second resolution: start the scenario clock on a whole second
            # so sped-up event times land on exact seconds instead of being floored by up to 1 s.
            time.sleep(1.0 - time.time() % 1.0)
        self._t0_mono = self.clock.monotonic()
        self._t0_wall = self.clock.wall_seconds()
        with self._cond:
            if self.trace is None:  # the initial (empty) document; a trace logs its first line
                self._changes.append(
                    ChangeRecord(self._incarnation, self._t0_wall, self._t0_mono, 0.0, ())
                )
            self._advance()
        serve = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name="imds-sim-http",
            daemon=True,
        )
        clock = threading.Thread(target=self._clock, name="imds-sim-clock", daemon=True)
        # On another clock than the real one, each request brings the document up to date.
        self._threads = [serve, clock] if self.clock is SYSTEM else [serve]
        for t in self._threads:
            t.start()
        return self

    def stop(self) -> None:
        """Stop serving, close open keep-alive connections, stop the clock."""
        if self._server is None:
            return
        self._stopping.set()
        with self._cond:
            self._cond.notify_all()
        self._server.shutdown()
        with self._cond:
            conns = list(self._conns)
        for c in conns:
            with contextlib.suppress(OSError):
                c.shutdown(socket.SHUT_RDWR)
        self._server.server_close()
        for t in self._threads:
            t.join(timeout=5)
        self._server = None

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        """The bound port (the requested one until ``start``)."""
        return self._port

    @property
    def url(self) -> str:
        """Base URL, e.g. ``http://127.0.0.1:PORT`` (the agent's ``imds.endpoint``)."""
        host = self.host if ":" not in self.host else f"[{self.host}]"
        return f"http://{host}:{self.port}"

    # -- state and test controls ---------------------------------------------------------

    @property
    def incarnation(self) -> int:
        with self._cond:
            self._advance()
            return self._incarnation

    def events(self) -> list[dict[str, Any]]:
        """The current events in full (2020-07-01) form."""
        with self._cond:
            self._advance()
            return [dict(e) for e in self._events]

    def document(self, api_version: str = LATEST) -> dict[str, Any]:
        """The document a GET with this api-version would return now (scenario/manual mode)."""
        with self._cond:
            self._advance()
            return {
                "DocumentIncarnation": self._incarnation,
                "Events": [render_event(e, api_version) for e in self._events],
            }

    @property
    def requests(self) -> list[RequestRecord]:
        with self._cond:
            return list(self._requests)

    @property
    def changes(self) -> list[ChangeRecord]:
        """Every document that became visible, the initial one first."""
        with self._cond:
            self._advance()
            return list(self._changes)

    @property
    def approvals(self) -> dict[str, float]:
        """EventId → wall time of its first approval."""
        with self._cond:
            return dict(self._approvals_wall)

    def event_id(self, index: int) -> str:
        """The EventId given to the scenario's ``index``-th event (random ones are per run)."""
        return self._timelines[index].event_id

    def approve(self, event_id: str) -> bool:
        """Approve as a POST would; False if the EventId is not in the current document."""
        with self._cond:
            self._advance()
            return self._approve_locked([event_id])

    def inject(
        self, kind: str, count: int = 1, *, delay: float = 0.0, body: str | None = None
    ) -> None:
        """Queue a fault for the next ``count`` scheduledevents GETs.

        Kinds: ``410``, ``429``, ``500``, ``503`` (that status), ``empty`` (200, no body),
        ``garbage`` (200, not JSON), ``wrong_shape`` (200, JSON that is not a document),
        ``drop`` (connection closed, no answer), ``hang`` (no answer for ``delay`` or
        ``hang_seconds``, then closed), ``slow`` (the normal answer after ``delay`` seconds),
        ``slow_first_call`` (the very first answer waits ``delay`` seconds; before any poll).
        """
        if kind == "slow_first_call":
            with self._cond:
                if self._first_call_done:
                    raise RuntimeError("the first call has already been answered")
                self.first_call_delay = delay
            return
        if kind not in FAULT_KINDS:
            raise ValueError(f"unknown fault kind {kind!r}; one of {', '.join(FAULT_KINDS)}")
        if count < 1:
            raise ValueError("count must be at least 1")
        with self._cond:
            self._faults.append(Fault(kind, count, delay, body))

    def inject_approval(self, status: int, count: int = 1) -> None:
        """Answer the next ``count`` approval POSTs with ``status`` (400, 429, 500...) instead
        of taking them."""
        with self._cond:
            self._approval_faults.extend([status] * count)

    def reset_approval_faults(self) -> None:
        with self._cond:
            self._approval_faults.clear()

    def pending_faults(self) -> int:
        with self._cond:
            return sum(f.remaining for f in self._faults)

    def set_events(
        self, events: Iterable[Mapping[str, Any]], *, incarnation: int | None = None
    ) -> int:
        """Serve this event array from now on (stops the scenario driving the document).

        Events are in wire form (``EventId`` required; NotBefore may be a string, an epoch or
        a datetime). The incarnation moves by one if the array changed, or to ``incarnation``
        if given (it may go backwards, as after a redeploy). Returns the incarnation.
        """
        wire = [wire_from_mapping(e) for e in events]
        with self._cond:
            self._manual = True
            changed = wire != self._events
            if incarnation is not None:
                changed = changed or incarnation != self._incarnation
                self._incarnation = incarnation
            elif changed:
                self._incarnation += 1
            self._events = wire
            if changed:
                self._log_change()
            self._cond.notify_all()
            return self._incarnation

    publish = set_events

    @property
    def finished(self) -> bool:
        """Nothing scripted is left to happen (scenario or trace)."""
        with self._cond:
            self._advance()
            return self._next_change() is None

    def wait_until(self, predicate: Callable[[Simulator], bool], timeout: float) -> bool:
        """Poll ``predicate(self)`` every 10 ms until true or ``timeout`` real seconds pass."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if predicate(self):
                return True
            time.sleep(0.01)
        return predicate(self)

    def wait_until_finished(self, timeout: float) -> bool:
        return self.wait_until(lambda s: s.finished, timeout)
