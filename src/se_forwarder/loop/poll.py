"""The poll loop: one IMDS request per tick, handed to the recorder; the chores between ticks.

The only hot path: an unchanged answer costs one HTTP request and a byte comparison. Polling
keeps its cadence whatever happens (a failed poll is the recorder's to count; the next tick is
the retry) and never waits for the instance document, which is a chore of its own.
"""

from __future__ import annotations

import threading

from .. import oshost
from ..clock import Clock
from ..imds.client import ImdsClient
from ..recording.recorder import Recorder
from .chores import Chores

BIG_ANSWER_BYTES = 1024 * 1024  # after such an answer, give the memory back to the system


class PollLoop:
    def __init__(
        self,
        client: ImdsClient,
        recorder: Recorder,
        chores: Chores,
        *,
        interval: float,
        stop: threading.Event,
        clock: Clock,
    ) -> None:
        self.client = client
        self.recorder = recorder
        self.chores = chores
        self.interval = interval
        self.stop = stop
        self.clock = clock
        self.last_poll_at: float | None = None  # wall clock, epoch seconds (for status)
        self.last_latency_ms: float | None = None

    def run(self) -> None:
        """Until ``stop``: poll, run what is due, wait for the next tick (a slow answer that made
        the loop fall behind is not made up for with a burst)."""
        clock, interval = self.clock, self.interval
        next_poll = clock.monotonic()
        self.chores.start(next_poll)
        while not self.stop.is_set():
            self.poll()
            t = clock.monotonic()
            self.chores.run_due(t)
            next_poll += interval
            if next_poll < t:
                next_poll = t + interval
            clock.wait(self.stop, next_poll - t)

    def poll(self) -> None:
        answer = self.client.scheduled_events()
        if answer.error is not None and self.stop.is_set():
            return  # interrupted by the stop request: not an observation
        at = self.recorder.now()  # a step of the wall clock is handled there
        self.last_poll_at = at / 1000
        self.last_latency_ms = answer.latency_ms
        if answer.error is not None:
            self.recorder.bad(at, answer.describe())
        else:
            self.recorder.answer(at, answer.status or 0, answer.body, date=answer.date)
            if len(answer.body) > BIG_ANSWER_BYTES:  # a pathological document: do not keep its RSS
                del answer
                oshost.release_memory()
