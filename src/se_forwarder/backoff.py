"""The one backoff: capped exponential with full jitter, and the service's Retry-After honoured
with a floor, a cap and a little jitter. IMDS polling and every sink's delivery use it, so a fleet
that failed at the same moment never comes back at the same moment."""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from .clock import SYSTEM, Clock
from .timefmt import parse_http_date_ms


@dataclass(frozen=True, slots=True)
class Schedule:
    base: float  # seconds before the first retry, at most
    cap: float  # never wait longer than this

    def delay(self, attempt: int) -> float:
        """Full jitter: uniform in [0, min(cap, base * 2**attempt)]."""
        return random.uniform(0, min(self.cap, self.base * 2 ** min(attempt, 30)))


FAST = Schedule(0.5, 60.0)  # throttling, outages, server errors
# Authorisation (a role assignment takes minutes to appear: retried at least every minute, so
# the backlog moves soon after it does), a refused contract, programming errors.
SLOW = Schedule(15.0, 60.0)
IMDS = Schedule(0.25, 8.0)  # the instance document at start
# An eviction a PodDisruptionBudget refuses (429, no Retry-After; kubectl drain waits 5 s), or
# an API server that did not answer, during a node's drain (kube/drain.py)
EVICTION = Schedule(2.0, 30.0)
MIN_RETRY_AFTER = 0.1  # a "Retry-After: 0" must not become a tight loop
MAX_RETRY_AFTER = 300.0  # an absurd Retry-After must not park a sink for hours


def after_retry_after(seconds: float, cap: float = MAX_RETRY_AFTER) -> float:
    """Honour the service's Retry-After (floored, capped), plus up to 10 % jitter."""
    return min(max(seconds, MIN_RETRY_AFTER), cap) * random.uniform(1.0, 1.1)


@runtime_checkable
class Headed(Protocol):
    """An HTTP answer with its headers (azure-core's responses; its exceptions type theirs
    without them)."""

    @property
    def headers(self) -> Mapping[str, str]: ...


def headers_of(response: object) -> Mapping[str, str] | None:
    """``response``'s headers, or None when there is no answer (or it carries none)."""
    return response.headers if isinstance(response, Headed) else None


def parse_retry_after(headers: Mapping[str, Any] | Any, clock: Clock = SYSTEM) -> float | None:
    """Seconds to wait from ``retry-after-ms``, ``x-ms-retry-after-ms`` or ``Retry-After``
    (seconds or an HTTP date); None when the answer gave none (or nothing usable)."""
    if headers is None:
        return None
    for name in ("retry-after-ms", "x-ms-retry-after-ms"):
        value = headers.get(name)
        if value:
            try:
                return max(0.0, float(value) / 1000.0)
            except ValueError:
                pass
    value = headers.get("Retry-After")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        return max(0.0, parse_http_date_ms(value) / 1000.0 - clock.wall_seconds())
    except ValueError:
        return None
