"""What the simulated IMDS says and remembers: its api-versions and paths, how an event is
rendered for an api-version, the request and change logs, and its 5 requests/s throttle."""

from __future__ import annotations

import collections
import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.utils import formatdate, parsedate_to_datetime
from typing import Any

log = logging.getLogger("se_forwarder.simulator")

#: Scheduled Events api-versions the service accepts (GA, newest first, then the preview).
SCHEDULED_EVENTS_VERSIONS = (
    "2020-07-01",
    "2019-08-01",
    "2019-04-01",
    "2019-01-01",
    "2017-11-01",
    "2017-08-01",
    "2017-03-01",
)
LATEST = SCHEDULED_EVENTS_VERSIONS[0]
INSTANCE_VERSIONS = frozenset(
    {
        "2017-03-01",
        "2017-04-02",
        "2017-08-01",
        "2017-10-01",
        "2017-12-01",
        "2018-02-01",
        "2018-04-02",
        "2018-10-01",
        "2019-02-01",
        "2019-03-11",
        "2019-04-30",
        "2019-06-01",
        "2019-06-04",
        "2019-08-01",
        "2019-08-15",
        "2019-11-01",
        "2020-06-01",
        "2020-07-15",
        "2020-09-01",
        "2020-10-01",
        "2020-12-01",
        "2021-01-01",
        "2021-02-01",
        "2021-03-01",
        "2021-05-01",
        "2021-08-01",
        "2021-10-01",
        "2021-11-01",
        "2021-11-15",
        "2021-12-13",
        "2023-07-01",
        "2023-11-15",
        "2024-03-15",
        "2024-07-17",
    }
)
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
class Fault:
    kind: str
    remaining: int
    delay: float
    body: str | None


def rfc1123(epoch: float) -> str:
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
            out["NotBefore"] = (
                parsedate_to_datetime(nb).astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            )
    return out


def wire_from_mapping(item: Mapping[str, Any]) -> dict[str, Any]:
    """A hand-written event for ``set_events``: defaults filled, NotBefore rendered."""
    if not isinstance(item.get("EventId"), str):
        raise TypeError("each event needs a string EventId")
    status = item.get("EventStatus", "Scheduled")
    nb = item.get("NotBefore", "")
    if isinstance(nb, datetime):
        nb = rfc1123(nb.timestamp())
    elif isinstance(nb, (int, float)):
        nb = rfc1123(nb)
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
