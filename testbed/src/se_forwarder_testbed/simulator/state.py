"""What the simulator's halves share: the state ``Simulator.__init__`` sets, declared once with its
types, so the clock half (``script.ScriptClock``) and the answering half
(``http_endpoints.HttpEndpoints``) are checked against it."""

from __future__ import annotations

import collections
import socket
import threading
from http.server import ThreadingHTTPServer
from typing import Any

from se_forwarder.clock import Clock

from ..standins.tokens import TokenAuthority
from .scenario import FaultSpec, Scenario, Timeline
from .tracescript import Observation
from .wire import ChangeRecord, Fault, RateLimiter, RequestRecord


class SimulatorState:
    """The simulator's state (set by ``Simulator.__init__``; every change under ``_cond``)."""

    clock: Clock  # the scenario's time, request and change times, the rate limit
    scenario: Scenario
    speed: float  # scenario seconds per real second
    trace: list[Observation] | None  # a recorded trace played instead of the scenario
    token_authority: TokenAuthority
    hang_seconds: float  # how long a "hang" fault holds a request
    first_call_delay: float  # real seconds the first Scheduled Events call waits
    instance_status: int | None  # set: /metadata/instance answers this status

    _cond: threading.Condition
    _stopping: threading.Event
    _server: ThreadingHTTPServer | None
    _conns: set[socket.socket]  # open keep-alive connections (closed by stop())
    _timelines: list[Timeline]
    _manual: bool  # set_events took over from the scenario
    _incarnation: int
    _events: list[dict[str, Any]]  # the published document's events, as served
    _approvals_scn: dict[str, float]  # EventId -> scenario time of its approval
    _approvals_wall: dict[str, float]  # EventId -> wall time of its approval
    _faults: collections.deque[Fault]  # faults queued for the next requests
    _approval_faults: collections.deque[int]  # statuses for the next approvals
    _scenario_faults: list[FaultSpec]  # the scenario's faults, by time
    _faults_fired: int
    _trace_index: int
    _first_call_done: bool
    _limiter: RateLimiter | None
    _requests: list[RequestRecord]
    _changes: list[ChangeRecord]
    _t0_mono: float  # the clock's monotonic time at scenario time 0
    _t0_wall: float  # ... and its wall time
    _t_last: float  # scenario time of the last published state
