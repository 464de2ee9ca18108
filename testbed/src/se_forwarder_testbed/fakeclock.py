"""A clock for tests: time passes only when the test moves it, and only once everything that works
for the agent is waiting on the clock, so what happens at each instant of fake time is the same
from run to run (only the order of threads woken at the very same instant is the scheduler's:
two of them taking turns in one request budget, say).

The agent's threads (the poll loop, the delivery workers, the approver, an event's lane) become
known to the clock when they first wait on it or are announced with ``track``. ``advance`` and
``run_until`` move time from one waiter's deadline to the next; after each step they wait, in
real time, until every known thread is back waiting on the clock (or has ended): a poll, a
commit, a delivery or a hook that a step woke runs to completion before time moves again, so a
test reads a settled agent and no thread spins. Work that no known thread waits for (a stand-in's
server thread, a hook's output reader) is not waited for.

Wall and monotonic time move together, except in ``step_wall`` (an NTP step: the wall clock
jumps, the monotonic one does not).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from se_forwarder.clock import Clock

START_MS = 1_772_359_200_000  # 2026-03-01T10:00:00Z: a whole second, the same in every run
SETTLE_LIMIT = 60.0  # real seconds a woken thread may work before the clock reports it


class FakeEvent(threading.Event):
    """An event whose ``set`` wakes the fake clock's waiters (and its settling)."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__()
        self.clock = clock

    def set(self) -> None:
        super().set()
        self.clock.notify()


@dataclass(slots=True)
class _Waiter:
    deadline: int | None  # fake nanoseconds
    event: FakeEvent


class FakeClock(Clock):
    def __init__(self, start_ms: int = START_MS, *, settle_limit: float = SETTLE_LIMIT) -> None:
        self._cond = threading.Condition()
        self._ns = 1_000 * 1_000_000_000  # monotonic: an arbitrary origin, as the real one has
        self._wall_offset_ns = start_ms * 1_000_000 - self._ns
        self._known: set[threading.Thread] = set()
        self._waiting: dict[threading.Thread, _Waiter] = {}
        self.settle_limit = settle_limit

    # -- the Clock ------------------------------------------------------------------------------

    def wall_ms(self) -> int:
        with self._cond:
            return (self._ns + self._wall_offset_ns) // 1_000_000

    def monotonic(self) -> float:
        with self._cond:
            return self._ns / 1e9

    def wall_seconds(self) -> float:
        with self._cond:
            return (self._ns + self._wall_offset_ns) / 1e9

    def event(self) -> FakeEvent:
        return FakeEvent(self)

    def track(self, thread: threading.Thread) -> None:
        with self._cond:
            self._known.add(thread)

    def wait(self, event: threading.Event, timeout: float | None) -> bool:
        if not isinstance(event, FakeEvent) or event.clock is not self:
            raise TypeError("a FakeClock waits only on events made by its own event()")
        me = threading.current_thread()
        with self._cond:
            if event.is_set():
                return True
            if timeout is not None and timeout <= 0:
                return False
            deadline = None if timeout is None else self._ns + max(1, round(timeout * 1e9))
            self._known.add(me)
            self._waiting[me] = _Waiter(deadline, event)
            self._cond.notify_all()  # a settling test may be waiting for exactly this
            try:
                while not event.is_set() and (deadline is None or self._ns < deadline):
                    self._cond.wait()
            finally:
                del self._waiting[me]
            return event.is_set()

    def notify(self) -> None:
        with self._cond:
            self._cond.notify_all()

    # -- the test's controls --------------------------------------------------------------------

    def advance(self, seconds: float) -> None:
        """Move time forward by ``seconds``, waking each waiter at its deadline in turn."""
        with self._cond:
            target = self._ns + round(seconds * 1e9)
            self._settle()
            while (nxt := self._next_deadline()) is not None and nxt <= target:
                self._move_to(nxt)
            self._move_to(target)

    def run_until(self, predicate: Callable[[], object], within: float) -> bool:
        """Move time from deadline to deadline until ``predicate()`` (read when settled) is true,
        for at most ``within`` fake seconds; whether it became true."""
        with self._cond:
            self._settle()
            end = self._ns + round(within * 1e9)
        while not predicate():
            with self._cond:
                nxt = self._next_deadline()
                if nxt is None or nxt > end:
                    self._move_to(end)
                    break
                self._move_to(nxt)
        return bool(predicate())

    def step_wall(self, seconds: float) -> None:
        """The wall clock jumps by ``seconds`` (back when negative); monotonic time does not."""
        with self._cond:
            self._wall_offset_ns += round(seconds * 1e9)

    def settle(self) -> None:
        """Wait (real time) until every known thread is waiting on the clock again."""
        with self._cond:
            self._settle()

    # -- internals ------------------------------------------------------------------------------

    def _move_to(self, ns: int) -> None:
        self._ns = max(self._ns, ns)
        self._cond.notify_all()
        self._settle()

    def _next_deadline(self) -> int | None:
        deadlines = [w.deadline for w in self._waiting.values() if w.deadline is not None]
        return min(deadlines) if deadlines else None

    def _busy(self) -> list[threading.Thread]:
        """Known threads that are working (not waiting on the clock, or about to wake)."""
        me = threading.current_thread()
        busy = []
        for t in list(self._known):
            if t is me or t.ident is None:  # the caller itself; announced but not started yet
                continue
            if not t.is_alive():
                self._known.discard(t)
                continue
            w = self._waiting.get(t)
            if w is None or w.event.is_set() or (w.deadline is not None and w.deadline <= self._ns):
                busy.append(t)
        return busy

    def _settle(self) -> None:
        limit = time.monotonic() + self.settle_limit
        while busy := self._busy():
            if time.monotonic() > limit:
                raise RuntimeError(
                    f"FakeClock: still working after {self.settle_limit:g} s of "
                    f"real time: {', '.join(t.name for t in busy)}"
                )
            self._cond.wait(0.01)  # a waiter notifies when it comes back; a thread's end does not
