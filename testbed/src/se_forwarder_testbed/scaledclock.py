"""A clock that runs ``speed`` times faster than the real one: the demo's scenario time.

The agents, the simulators, the collector and the Logs Ingestion stand-in of ``se-forwarder demo``
all read it, so every time they write (TimeGenerated, NotBefore, notice, impact window, ingestion
time) is scenario time: 45 minutes of maintenance played in 45 real seconds read as 45 minutes in
the terminal, in Log Analytics and in the report alike. Waits are real waits, ``speed`` times
shorter.

``hold()`` stops time until ``release()`` (time then goes on from where it stood, with no jump):
simulators started while it holds share one scenario origin to the millisecond.
"""

from __future__ import annotations

import threading
import time

from se_forwarder.clock import Clock


class ScaledClock(Clock):
    def __init__(self, speed: float, start_ms: int) -> None:
        """``start_ms``: the wall time (epoch ms) this clock reads now."""
        if speed <= 0:
            raise ValueError("speed must be positive")
        self.speed = float(speed)
        self._lock = threading.Lock()
        self._real0 = time.monotonic()
        self._scaled0 = 0.0  # scenario seconds at _real0
        self._wall0_ms = start_ms
        self._held: float | None = None

    def monotonic(self) -> float:
        with self._lock:
            if self._held is not None:
                return self._held
            return self._scaled0 + (time.monotonic() - self._real0) * self.speed

    def wall_ms(self) -> int:
        return self._wall0_ms + int(self.monotonic() * 1000)

    def wall_seconds(self) -> float:
        return self._wall0_ms / 1000 + self.monotonic()

    def wait(self, event: threading.Event, timeout: float | None) -> bool:
        return event.wait(None if timeout is None else max(0.0, timeout) / self.speed)

    def event(self) -> threading.Event:
        return threading.Event()

    def hold(self) -> None:
        """Stop time (until ``release``)."""
        now = self.monotonic()
        with self._lock:
            self._held = now

    def release(self) -> None:
        with self._lock:
            if self._held is not None:
                self._scaled0, self._real0, self._held = self._held, time.monotonic(), None
