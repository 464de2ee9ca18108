"""Time, in one place: the only module of the agent that reads the system clock or waits for time
to pass (tests/architecture holds it).

Everything on the run path takes a ``Clock``: "now" on the wall (epoch milliseconds, what records
and status.json say), "now" on the monotonic clock (seconds, for intervals, deadlines and
deltas, which a stepped wall clock must not bend), and waiting on an event with a timeout (the
poll cadence, retries, linger, idle wake-ups). ``SYSTEM`` is the real clock; the test bed's
``FakeClock`` stands in for it, so the agent's behaviour over minutes runs in milliseconds.

Events a clock waits on are made by ``clock.event()``; threads whose work a fake clock must let
finish before time moves on are announced with ``clock.track(thread)`` before they start.
"""

from __future__ import annotations

import threading
import time
from abc import ABC, abstractmethod


class Clock(ABC):
    @abstractmethod
    def wall_ms(self) -> int:
        """Wall-clock time, epoch milliseconds (it may be stepped: NTP, a host resync)."""

    @abstractmethod
    def monotonic(self) -> float:
        """Seconds on a clock that is never stepped: only differences mean anything."""

    @abstractmethod
    def wait(self, event: threading.Event, timeout: float | None) -> bool:
        """Until ``event`` is set or ``timeout`` seconds pass (None: no limit); True if set."""

    @abstractmethod
    def event(self) -> threading.Event:
        """An event this clock can wait on."""

    # not abstract: real time waits for no thread, so only a fake clock overrides it
    def track(self, thread: threading.Thread) -> None:  # noqa: B027
        """``thread`` (not started yet) works for the agent: a fake clock lets its work finish
        before time moves on."""

    def wall_seconds(self) -> float:
        """Wall-clock time, epoch seconds (status.json's unit), as finely as the clock tells."""
        return self.wall_ms() / 1000.0

    def sleep(self, seconds: float) -> None:
        self.wait(self.event(), seconds)


class SystemClock(Clock):
    """The real clock."""

    def wall_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def monotonic(self) -> float:
        return time.monotonic()

    def wall_seconds(self) -> float:
        return time.time()

    def wait(self, event: threading.Event, timeout: float | None) -> bool:
        return event.wait(timeout)

    def event(self) -> threading.Event:
        return threading.Event()


SYSTEM: Clock = SystemClock()
