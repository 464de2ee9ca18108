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
import json
import logging
import math
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.utils import formatdate, parsedate_to_datetime
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Self
from urllib.parse import parse_qs, urlsplit

from ..standins.tokens import TokenAuthority
from .scenario import FAULT_KINDS, EventState, Scenario, Timeline, load_scenario
from .trace import Observation, load_trace

log = logging.getLogger("se_forwarder.simulator")

#: Scheduled Events api-versions the service accepts (GA, newest first, then the preview).
SCHEDULED_EVENTS_VERSIONS = ("2020-07-01", "2019-08-01", "2019-04-01", "2019-01-01",
                             "2017-11-01", "2017-08-01", "2017-03-01")
LATEST = SCHEDULED_EVENTS_VERSIONS[0]
INSTANCE_VERSIONS = frozenset({
    "2017-03-01", "2017-04-02", "2017-08-01", "2017-10-01", "2017-12-01", "2018-02-01",
    "2018-04-02", "2018-10-01", "2019-02-01", "2019-03-11", "2019-04-30", "2019-06-01",
    "2019-06-04", "2019-08-01", "2019-08-15", "2019-11-01", "2020-06-01", "2020-07-15",
    "2020-09-01", "2020-10-01", "2020-12-01", "2021-01-01", "2021-02-01", "2021-03-01",
    "2021-05-01", "2021-08-01", "2021-10-01", "2021-11-01", "2021-11-15", "2021-12-13",
    "2023-07-01", "2023-11-15", "2024-03-15", "2024-07-17",
})
IDENTITY_VERSIONS = frozenset({"2018-02-01", "2019-08-01"})
TOKEN_LIFETIME = 86399

SE_PATH = "/metadata/scheduledevents"
INSTANCE_PATH = "/metadata/instance"
TOKEN_PATH = "/metadata/identity/oauth2/token"


@dataclass(frozen=True)
class RequestRecord:
    """One request as the simulator saw it; ``status`` is None when the connection was dropped."""

    at: float
    method: str
    path: str
    headers: dict[str, str]
    status: int | None
    client_port: int = 0


@dataclass(frozen=True)
class ChangeRecord:
    """A new document became visible at ``wall`` (epoch seconds; ``monotonic`` likewise).

    ``scenario_time`` is when the script placed the change (traces: the observation's offset);
    ``events`` are in full 2020-07-01 form.
    """

    incarnation: int | None
    wall: float
    monotonic: float
    scenario_time: float
    events: tuple[dict[str, Any], ...] = field(default=())


@dataclass
class _Fault:
    kind: str
    remaining: int
    delay: float
    body: str | None


def _rfc1123(epoch: float) -> str:
    """``Mon, 11 Apr 2022 22:26:58 GMT`` at second resolution (floored: never later than due)."""
    return formatdate(math.floor(epoch), usegmt=True)


def render_event(wire: Mapping[str, Any], api_version: str) -> dict[str, Any]:
    """An event (full 2020-07-01 form) as a given api-version serves it."""
    out = dict(wire)
    if api_version < "2020-07-01":
        out.pop("DurationInSeconds", None)
    if api_version < "2019-08-01":
        out.pop("EventSource", None)
    if api_version < "2019-04-01":
        out.pop("Description", None)
    if api_version < "2017-08-01":
        out["Resources"] = ["_" + r for r in out.get("Resources", [])]
        nb = out.get("NotBefore")
        if nb:  # the preview documented ISO 8601
            out["NotBefore"] = parsedate_to_datetime(nb).astimezone(UTC).strftime(
                "%Y-%m-%dT%H:%M:%SZ")
    return out


def _wire_from_mapping(item: Mapping[str, Any]) -> dict[str, Any]:
    """A hand-written event for ``set_events``: defaults filled, NotBefore rendered."""
    if not isinstance(item.get("EventId"), str):
        raise TypeError("each event needs a string EventId")
    status = item.get("EventStatus", "Scheduled")
    nb = item.get("NotBefore", "")
    if isinstance(nb, datetime):
        nb = _rfc1123(nb.timestamp())
    elif isinstance(nb, (int, float)):
        nb = _rfc1123(nb)
    if status == "Started":
        nb = ""
    return {
        "EventId": item["EventId"],
        "EventStatus": status,
        "EventType": item.get("EventType", "Freeze"),
        "ResourceType": item.get("ResourceType", "VirtualMachine"),
        "Resources": list(item.get("Resources", [])),
        "NotBefore": nb,
        "Description": item.get("Description", ""),
        "EventSource": item.get("EventSource", "Platform"),
        "DurationInSeconds": int(item.get("DurationInSeconds", -1)),
    }


class RateLimiter:
    """IMDS's throttle: at most ``limit`` admitted requests in any sliding ``window`` seconds.

    Refused requests are not counted, so a client that backs off gets through again one window
    after its oldest admitted request. Not thread-safe: the simulator calls it under its lock.
    """

    def __init__(self, limit: int, window: float = 1.0) -> None:
        self.limit = limit
        self.window = window
        self._admitted: collections.deque[float] = collections.deque()

    def allow(self, now: float) -> bool:
        while self._admitted and self._admitted[0] <= now - self.window:
            self._admitted.popleft()
        if len(self._admitted) >= self.limit:
            return False
        self._admitted.append(now)
        return True


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "IMDS-Simulator"
    sys_version = ""
    sim: Simulator

    def setup(self) -> None:
        super().setup()
        # Without this, Nagle's algorithm and the client's delayed ACK add ~40 ms to polls.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sim._track(self.connection, True)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            self.sim._track(self.connection, False)

    def log_message(self, format: str, *args: Any) -> None:
        """Silence the stdlib's own line; the simulator logs each request itself."""

    def do_GET(self) -> None:
        self.sim._dispatch(self, "GET")

    def do_POST(self) -> None:
        self.sim._dispatch(self, "POST")

    def do_PUT(self) -> None:
        self.sim._dispatch(self, "PUT")

    def do_DELETE(self) -> None:
        self.sim._dispatch(self, "DELETE")

    def do_PATCH(self) -> None:
        self.sim._dispatch(self, "PATCH")

    def do_HEAD(self) -> None:
        self.sim._dispatch(self, "HEAD")


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False  # idle keep-alive connections must not hold up stop()


class Simulator:
    """A local IMDS. Drive it from a scenario, a trace, or by hand (``set_events``).

    ``speed`` divides scenario times (None: the scenario's own default). ``first_call_delay`` is
    in real seconds and overrides the scenario's. ``rate_limit`` is requests per sliding second
    over all ``/metadata/`` paths (None disables it).
    """

    def __init__(self, scenario: Scenario | str | Path | None = None, *, host: str = "127.0.0.1",
                 port: int = 0, speed: float | None = None,
                 token_authority: TokenAuthority | None = None, trace: str | Path | None = None,
                 vm_name: str | None = None, first_call_delay: float | None = None,
                 rate_limit: int | None = 5, hang_seconds: float = 3.0) -> None:
        if scenario is None:
            scenario = Scenario()
        elif not isinstance(scenario, Scenario):
            scenario = load_scenario(scenario)
        if vm_name:
            scenario = scenario.model_copy(
                update={"vm": scenario.vm.model_copy(update={"name": vm_name})})
        self.scenario: Scenario = scenario
        self.speed = float(speed if speed is not None else scenario.speed)
        if self.speed <= 0:
            raise ValueError("speed must be positive")
        self.host = host
        self._port = port
        self.token_authority = token_authority or TokenAuthority()
        self.rate_limit = rate_limit
        self.hang_seconds = hang_seconds
        self.first_call_delay = (first_call_delay if first_call_delay is not None
                                 else scenario.first_call_delay / self.speed)
        self.trace: list[Observation] | None = load_trace(trace) if trace is not None else None
        self.instance_status: int | None = None  # set: /metadata/instance answers this status

        self._cond = threading.Condition()
        self._stopping = threading.Event()
        self._timelines = [Timeline(e, e.id or str(uuid.uuid4()), scenario.vm.name)
                           for e in scenario.events]
        self._manual = False
        self._incarnation = scenario.incarnation
        self._events: list[dict[str, Any]] = []
        self._approvals_scn: dict[str, float] = {}
        self._approvals_wall: dict[str, float] = {}
        self._faults: collections.deque[_Fault] = collections.deque()
        self._approval_faults: collections.deque[int] = collections.deque()
        self._scenario_faults = sorted(scenario.faults, key=lambda f: f.at)
        self._faults_fired = 0
        self._trace_index = -1
        self._first_call_done = False
        self._limiter = RateLimiter(rate_limit) if rate_limit else None
        self._requests: list[RequestRecord] = []
        self._changes: list[ChangeRecord] = []
        self._conns: set[socket.socket] = set()
        self._server: _Server | None = None
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
        server_class = _Server
        if ":" in self.host:
            server_class = type("Server6", (_Server,), {"address_family": socket.AF_INET6})
        self._server = server_class((self.host, self._port), handler)
        self._port = self._server.server_address[1]
        if self.speed > 1:
            # NotBefore has whole-second resolution: start the scenario clock on a whole second
            # so sped-up event times land on exact seconds instead of being floored by up to 1 s.
            time.sleep(1.0 - time.time() % 1.0)
        self._t0_mono = time.monotonic()
        self._t0_wall = time.time()
        with self._cond:
            if self.trace is None:  # the initial (empty) document; a trace logs its first line
                self._changes.append(ChangeRecord(self._incarnation, self._t0_wall,
                                                  self._t0_mono, 0.0, ()))
            self._advance()
        serve = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                 name="imds-sim-http", daemon=True)
        clock = threading.Thread(target=self._clock, name="imds-sim-clock", daemon=True)
        self._threads = [serve, clock]
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
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
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

    # -- clocks ---------------------------------------------------------------------------

    def scenario_time(self) -> float:
        """Scenario seconds since start (real seconds times speed)."""
        return (time.monotonic() - self._t0_mono) * self.speed

    def wall_time_of(self, scenario_seconds: float) -> float:
        """The real epoch time a scenario time maps to (how NotBefore is rendered)."""
        return self._t0_wall + scenario_seconds / self.speed

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
            return {"DocumentIncarnation": self._incarnation,
                    "Events": [render_event(e, api_version) for e in self._events]}

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

    def inject(self, kind: str, count: int = 1, *, delay: float = 0.0,
               body: str | None = None) -> None:
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
            self._faults.append(_Fault(kind, count, delay, body))

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

    def set_events(self, events: Iterable[Mapping[str, Any]], *,
                   incarnation: int | None = None) -> int:
        """Serve this event array from now on (stops the scenario driving the document).

        Events are in wire form (``EventId`` required; NotBefore may be a string, an epoch or
        a datetime). The incarnation moves by one if the array changed, or to ``incarnation``
        if given (it may go backwards, as after a redeploy). Returns the incarnation.
        """
        wire = [_wire_from_mapping(e) for e in events]
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

    def instance_document(self) -> dict[str, Any]:
        """``/metadata/instance`` as the real service shapes it (domains as strings, like IMDS)."""
        vm = self.scenario.vm
        compute = {
            "azEnvironment": "AzurePublicCloud",
            "isHostCompatibilityLayerVm": "false",
            "location": vm.location,
            "name": vm.name,
            "offer": "0001-com-ubuntu-server-jammy" if vm.os_type == "Linux" else "WindowsServer",
            "osProfile": {"adminUsername": "azureuser", "computerName": vm.name,
                          "disablePasswordAuthentication": "true"},
            "osType": vm.os_type,
            "placementGroupId": "",
            "platformFaultDomain": str(vm.fault_domain),
            "platformUpdateDomain": str(vm.update_domain),
            "priority": "Regular",
            "provider": "Microsoft.Compute",
            "publisher": "Canonical" if vm.os_type == "Linux" else "MicrosoftWindowsServer",
            "resourceGroupName": vm.resource_group,
            "resourceId": vm.resource_id,
            "sku": "22_04-lts-gen2" if vm.os_type == "Linux" else "2022-datacenter",
            "subscriptionId": vm.subscription_id,
            "tags": ";".join(f"{k}:{v}" for k, v in vm.tags.items()),
            "tagsList": [{"name": k, "value": v} for k, v in vm.tags.items()],
            "userData": "",
            "version": "latest",
            "vmId": vm.vm_id,
            "vmScaleSetName": vm.scale_set,
            "vmSize": vm.vm_size,
            "zone": vm.zone,
        }
        network = {"interface": [{
            "ipv4": {"ipAddress": [{"privateIpAddress": vm.private_ip, "publicIpAddress": ""}],
                     "subnet": [{"address": vm.private_ip.rsplit(".", 1)[0] + ".0",
                                 "prefix": "24"}]},
            "ipv6": {"ipAddress": []},
            "macAddress": "000D3A2B4C5D",
        }]}
        return {"compute": compute, "network": network}

    # -- internals: the clock -------------------------------------------------------------

    def _track(self, conn: socket.socket, add: bool) -> None:
        with self._cond:
            if add:
                self._conns.add(conn)
            else:
                self._conns.discard(conn)

    def _log_change(self, incarnation: int | None = None, events: Iterable[dict] = (),
                    scenario_time: float | None = None) -> None:
        """Record (under the lock) that a new document is visible from this instant."""
        inc = self._incarnation if self.trace is None else incarnation
        evs = tuple(dict(e) for e in (self._events if self.trace is None else events))
        mono = time.monotonic()
        if scenario_time is None:
            scenario_time = (mono - self._t0_mono) * self.speed
        self._changes.append(ChangeRecord(inc, time.time(), mono, scenario_time, evs))

    def _wire(self, st: EventState) -> dict[str, Any]:
        return {
            "EventId": st.event_id,
            "EventStatus": st.status,
            "EventType": st.event_type,
            "ResourceType": st.resource_type,
            "Resources": list(st.resources),
            "NotBefore": "" if st.not_before is None else _rfc1123(self.wall_time_of(st.not_before)),
            "Description": st.description,
            "EventSource": st.source,
            "DurationInSeconds": st.duration,
        }

    def _advance(self) -> None:
        """Bring the published document up to now (idempotent; call with the lock held)."""
        if self._server is None and not self._t0_mono:
            return
        t = (time.monotonic() - self._t0_mono) * self.speed
        while (self._faults_fired < len(self._scenario_faults)
               and self._scenario_faults[self._faults_fired].at <= t):
            f = self._scenario_faults[self._faults_fired]
            self._faults.append(_Fault(f.kind, f.count, f.delay, None))
            self._faults_fired += 1
        if self.trace is not None:
            while (self._trace_index + 1 < len(self.trace)
                   and self.trace[self._trace_index + 1].offset <= t):
                prev = self.trace[self._trace_index] if self._trace_index >= 0 else None
                self._trace_index += 1
                obs = self.trace[self._trace_index]
                if prev is None or (prev.status, prev.body, prev.text, prev.error) != (
                        obs.status, obs.body, obs.text, obs.error):
                    body = obs.body if isinstance(obs.body, dict) else {}
                    inc = body.get("DocumentIncarnation")
                    evs = body.get("Events") if isinstance(body.get("Events"), list) else []
                    self._log_change(inc if isinstance(inc, int) else None, evs, obs.offset)
            return
        if self._manual:
            return
        # Step through every scripted change since the last evaluation, so each scenario state
        # gets its own incarnation even if the clock thread woke late (deterministic numbering).
        while True:
            nxt = self._next_event_change(self._t_last)
            if nxt is None or nxt > t:
                break
            self._publish_state_at(nxt)
        self._publish_state_at(t)

    def _publish_state_at(self, t: float) -> None:
        self._t_last = max(self._t_last, t)
        current = []
        for tl in self._timelines:
            st = tl.state_at(t, self._approvals_scn.get(tl.event_id))
            if st is not None:
                current.append(self._wire(st))
        if current != self._events:
            self._events = current
            self._incarnation += 1
            self._log_change(scenario_time=t)

    def _next_event_change(self, after: float) -> float | None:
        times = [x for tl in self._timelines for x in tl.change_times(self._approvals_scn)
                 if x > after]
        return min(times) if times else None

    def _next_change(self) -> float | None:
        """Scenario time of the next scripted change after now, or None."""
        candidates: list[float] = []
        if self._faults_fired < len(self._scenario_faults):
            candidates.append(self._scenario_faults[self._faults_fired].at)
        if self.trace is not None:
            if self._trace_index + 1 < len(self.trace):
                candidates.append(self.trace[self._trace_index + 1].offset)
        elif not self._manual:
            nxt = self._next_event_change(self._t_last)
            if nxt is not None:
                candidates.append(nxt)
        return min(candidates) if candidates else None

    def _clock(self) -> None:
        while not self._stopping.is_set():
            with self._cond:
                self._advance()
                nxt = self._next_change()
                if nxt is None:
                    timeout = None
                else:
                    timeout = max(0.0, (nxt - self.scenario_time()) / self.speed) + 0.0005
                self._cond.wait(timeout)

    def _approve_locked(self, ids: list[str]) -> bool:
        if self.trace is not None:
            known = self._trace_current().event_ids() if self._trace_index >= 0 else set()
            current = {i.lower(): i for i in known}
        else:
            current = {e["EventId"].lower(): e["EventId"] for e in self._events}
        if not ids or any(i.lower() not in current for i in ids):
            return False
        now_scn = self.scenario_time()
        for i in ids:
            eid = current[i.lower()]
            self._approvals_wall.setdefault(eid, time.time())
            self._approvals_scn.setdefault(eid, now_scn)
        self._cond.notify_all()
        return True

    def _trace_current(self) -> Observation:
        return self.trace[self._trace_index]  # type: ignore[index]

    # -- internals: HTTP ------------------------------------------------------------------

    def _rate_limited(self) -> bool:
        if self._limiter is None:
            return False
        with self._cond:
            return not self._limiter.allow(time.monotonic())

    def _record(self, h: _Handler, method: str, status: int | None) -> None:
        rec = RequestRecord(time.time(), method, h.path, {k: v for k, v in h.headers.items()},
                            status, h.client_address[1])
        with self._cond:
            self._requests.append(rec)
        log.info('%s "%s %s" %s', h.client_address[0], method, h.path,
                 status if status is not None else "dropped")

    def _send(self, h: _Handler, method: str, status: int, body: bytes | None,
              content_type: str = "application/json; charset=utf-8") -> None:
        self._record(h, method, status)  # before answering: a client may look right after
        head = [f"{h.protocol_version} {status} {HTTPStatus(status).phrase}",
                f"Server: {h.version_string()}", f"Date: {h.date_time_string()}"]
        if body:
            head.append(f"Content-Type: {content_type}")
        head.append(f"Content-Length: {len(body or b'')}")
        data = ("\r\n".join(head) + "\r\n\r\n").encode("latin-1")
        if body and method != "HEAD":
            data += body
        h.wfile.write(data)  # headers and body in one write: one segment per answer
        h.wfile.flush()

    def _json(self, h: _Handler, method: str, status: int, obj: Any) -> None:
        self._send(h, method, status, json.dumps(obj, separators=(",", ":")).encode())

    def _drop(self, h: _Handler, method: str, hold: float = 0.0) -> None:
        self._record(h, method, None)
        if hold:
            self._stopping.wait(hold)
        h.close_connection = True
        try:
            h.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def _dispatch(self, h: _Handler, method: str) -> None:
        try:
            self._dispatch_inner(h, method)
        except (BrokenPipeError, ConnectionResetError):
            h.close_connection = True

    def _dispatch_inner(self, h: _Handler, method: str) -> None:
        length = h.headers.get("Content-Length")
        try:
            body = h.rfile.read(int(length)) if length else b""
        except ValueError:
            h.close_connection = True
            return self._json(h, method, 400, {"error": "Bad request. Invalid Content-Length"})
        parts = urlsplit(h.path)
        path = parts.path.rstrip("/") or "/"
        query = parse_qs(parts.query, keep_blank_values=True)
        if path.startswith("/metadata") and self._rate_limited():
            return self._json(h, method, 429, {"error": "Too many requests"})
        if "X-Forwarded-For" in h.headers:
            return self._json(h, method, 400, {
                "error": "Bad request. Requests with an X-Forwarded-For header are not allowed"})
        if path == SE_PATH:
            if method not in ("GET", "POST"):
                return self._json(h, method, 405, {"error": "Method not allowed"})
        elif path == INSTANCE_PATH or path.startswith(INSTANCE_PATH + "/") or path == TOKEN_PATH:
            if method != "GET":
                return self._json(h, method, 405, {"error": "Method not allowed"})
        else:
            return self._json(h, method, 404, {"error": "Not found"})
        if path == TOKEN_PATH:
            return self._token(h, method, query)
        if h.headers.get("Metadata") != "true":
            return self._json(h, method, 400, {
                "error": "Bad request. Required metadata header not specified"})
        version = query.get("api-version", [""])[0]
        allowed = SCHEDULED_EVENTS_VERSIONS if path == SE_PATH else INSTANCE_VERSIONS
        if not version or version not in allowed:
            newest = sorted(allowed, reverse=True)[:3]
            return self._json(h, method, 400, {
                "error": "Bad request. api-version is invalid or was not specified in the "
                         "request. For more information refer to aka.ms/azureimds",
                "newest-versions": newest})
        if path == SE_PATH and method == "POST":
            return self._approval(h, method, body)
        if path == SE_PATH:
            return self._scheduled_events(h, method, version)
        return self._instance(h, method, path, query)

    def _scheduled_events(self, h: _Handler, method: str, version: str) -> None:
        with self._cond:
            first = not self._first_call_done
            self._first_call_done = True
        if first and self.first_call_delay > 0:
            self._stopping.wait(self.first_call_delay)
        fault: _Fault | None = None
        with self._cond:
            if self._faults:
                fault = self._faults[0]
                fault.remaining -= 1
                if fault.remaining <= 0:
                    self._faults.popleft()
        if fault is not None:
            k = fault.kind
            if k in ("410", "429", "500", "503"):
                texts = {"410": "Gone", "429": "Too many requests", "500": "Internal Server Error",
                         "503": "Service Unavailable"}
                return self._json(h, method, int(k), {"error": texts[k]})
            if k == "empty":
                return self._send(h, method, 200, None)
            if k == "garbage":
                text = fault.body if fault.body is not None else "<html><body>upstream error"
                return self._send(h, method, 200, text.encode(), "text/html")
            if k == "wrong_shape":
                text = fault.body if fault.body is not None else json.dumps(
                    {"DocumentIncarnation": "not-a-number", "Events": {"EventId": 42}})
                return self._send(h, method, 200, text.encode())
            if k == "drop":
                return self._drop(h, method)
            if k == "hang":
                return self._drop(h, method, fault.delay or self.hang_seconds)
            if k == "slow":
                self._stopping.wait(fault.delay)
        with self._cond:
            self._advance()
            if self.trace is not None:
                obs = self._trace_current()
                doc = None
            else:
                obs = None
                doc = {"DocumentIncarnation": self._incarnation,
                       "Events": [render_event(e, version) for e in self._events]}
        if obs is None:
            return self._json(h, method, 200, doc)
        if obs.error is not None:
            return self._drop(h, method, self.hang_seconds if obs.error == "timeout" else 0.0)
        if obs.has_body:
            return self._json(h, method, obs.status or 200, obs.body)
        return self._send(h, method, obs.status or 200, (obs.text or "").encode(),
                          "text/plain; charset=utf-8")

    def _approval(self, h: _Handler, method: str, body: bytes) -> None:
        with self._cond:
            fault = self._approval_faults.popleft() if self._approval_faults else None
        if fault is not None:
            return self._json(h, method, fault, {"error": HTTPStatus(fault).phrase})
        bad = {"error": "Bad request. The StartRequests payload is malformed"}
        try:
            payload = json.loads(body)
        except (json.JSONDecodeError, UnicodeDecodeError):
            return self._json(h, method, 400, bad)
        if not isinstance(payload, dict) or set(payload) - {"StartRequests", "DocumentIncarnation"}:
            return self._json(h, method, 400, bad)
        reqs = payload.get("StartRequests")
        if not isinstance(reqs, list) or not reqs or not all(
                isinstance(r, dict) and set(r) == {"EventId"} and isinstance(r["EventId"], str)
                for r in reqs):
            return self._json(h, method, 400, bad)
        with self._cond:
            self._advance()
            ok = self._approve_locked([r["EventId"] for r in reqs])
        if not ok:
            return self._json(h, method, 400, {"error": "Bad request. Unknown EventId"})
        return self._send(h, method, 200, None)

    def _instance(self, h: _Handler, method: str, path: str,
                  query: dict[str, list[str]]) -> None:
        if self.instance_status is not None:  # the instance document failing (tests)
            return self._json(h, method, self.instance_status, {"error": "unavailable"})
        node: Any = self.instance_document()
        for part in [p for p in path[len(INSTANCE_PATH):].split("/") if p]:
            if isinstance(node, dict) and part in node:
                node = node[part]
            elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
                node = node[int(part)]
            else:
                return self._json(h, method, 404, {"error": "Not found"})
        fmt = query.get("format", ["json"])[0]
        if fmt == "text":
            if isinstance(node, dict):
                text = "\n".join(f"{k}/" if isinstance(v, (dict, list)) else k
                                 for k, v in node.items())
            elif isinstance(node, list):
                text = "\n".join(f"{i}/" for i in range(len(node)))
            else:
                text = str(node)
            return self._send(h, method, 200, text.encode(), "text/plain; charset=utf-8")
        if fmt != "json":
            return self._json(h, method, 400, {"error": "Bad request. Invalid format"})
        if not isinstance(node, (dict, list)):
            return self._json(h, method, 400, {
                "error": "Bad request. Query parameter format=text is required for leaf nodes"})
        return self._json(h, method, 200, node)

    def _token(self, h: _Handler, method: str, query: dict[str, list[str]]) -> None:
        def refuse(desc: str) -> None:
            return self._json(h, method, 400, {"error": "invalid_request",
                                               "error_description": desc})

        if h.headers.get("Metadata") != "true":
            return refuse("Required metadata header not specified")
        version = query.get("api-version", [""])[0]
        if not version:
            return refuse("Required query variable 'api-version' is missing")
        if version not in IDENTITY_VERSIONS:
            return refuse("Invalid api-version")
        resource = query.get("resource", [""])[0]
        if not resource:
            return refuse("Required query variable 'resource' is missing")
        selectors = {k: query[k][0] for k in ("client_id", "object_id", "msi_res_id", "mi_res_id")
                     if k in query}
        ids = self.scenario.identities
        if len(selectors) > 1:
            return refuse("Only one of client_id, object_id or msi_res_id may be given")
        if selectors:
            key, value = next(iter(selectors.items()))
            attr = {"client_id": "client_id", "object_id": "object_id",
                    "msi_res_id": "resource_id", "mi_res_id": "resource_id"}[key]
            match = [i for i in ids if getattr(i, attr).lower() == value.lower()]
            if not match:
                return refuse("Identity not found")
            subject, client_id = match[0].client_id, match[0].client_id
        elif self.scenario.system_identity:
            subject, client_id = "system-assigned", self.scenario.vm.vm_id
        elif len(ids) == 1:
            subject, client_id = ids[0].client_id, ids[0].client_id
        elif ids:
            return refuse("Multiple user assigned identities exist, please specify the clientId "
                          "/ resourceId of the identity in the token request")
        else:
            return refuse("Identity not found")
        now = int(time.time())
        token, expires_on = self.token_authority.issue(resource, subject=subject,
                                                       lifetime=TOKEN_LIFETIME, now=now)
        return self._json(h, method, 200, {
            "access_token": token, "client_id": client_id,
            "expires_in": str(expires_on - now), "expires_on": str(expires_on),
            "ext_expires_in": str(expires_on - now), "not_before": str(now),
            "resource": resource, "token_type": "Bearer"})
