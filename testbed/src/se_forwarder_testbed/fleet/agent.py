"""One VM's agent over the data's span: the project's own tracker fed at the document's change
moments, heartbeats built by ``health.Snapshot.heartbeat``, and a delivery model that decides
when each row reaches Log Analytics (its ingestion time) and which rows arrive twice.

What the real agent does that is kept: polls once a second from the first poll of a run (so a
change is seen at the next whole second, ``UncertaintySeconds`` 1); tracker state survives a
restart (``tracker.restarted``), so the first poll after a downtime spans it; a start heartbeat,
one every interval (with the loop's drift) and a stop heartbeat on a clean stop; counters
(polls, poll errors, deliveries) restart at 0 with each run; the spool survives restarts.
"""

from __future__ import annotations

import heapq
import random
from bisect import bisect_right
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Any

from se_forwarder import tracker
from se_forwarder.health import OpenEvent, Snapshot
from se_forwarder.model import Document
from se_forwarder.report.kql.shims import INGESTION_COLUMN
from se_forwarder.timefmt import format_ms

from .model import SECOND, EventPlan, Run, VmPlan

_V4_MASK = ~(0xF000 << 64 | 0xC000 << 48) & (1 << 128) - 1
_V4_BITS = 0x4000 << 64 | 0x8000 << 48
POLL = SECOND
IDENTITY_READ = 500  # ms between the process start and the start heartbeat


@lru_cache(maxsize=64)
def _day_prefix(day: int) -> str:
    return format_ms(day * 86_400_000)[:11]


def iso(ms: int) -> str:
    """``timefmt.format_ms`` for times after 1970, without its per-call date arithmetic
    (millions of heartbeats)."""
    day, rest = divmod(ms, 86_400_000)
    sec, milli = divmod(rest, 1000)
    h, rem = divmod(sec, 3600)
    return f"{_day_prefix(day)}{h:02d}:{rem // 60:02d}:{rem % 60:02d}.{milli:03d}Z"


@dataclass(slots=True)
class _Spool:
    """Rows waiting for delivery (their ingestion times) and the run's delivery counters."""

    pending: list[int] = field(default_factory=list)
    delivered: int = 0
    dropped: int = 0

    def advance(self, t: int) -> None:
        while self.pending and self.pending[0] <= t:
            heapq.heappop(self.pending)
            self.delivered += 1


class VmAgent:
    """Generates one VM's rows in time order (``rows()``)."""

    def __init__(
        self,
        plan: VmPlan,
        events: list[EventPlan],
        docs: list[tuple[int, Document]],
        end: int,
        heartbeat_ms: int,
        seed: int,
        coarse: tuple[int, int] | None = None,
    ) -> None:
        self.plan, self.vm, self.end = plan, plan.vm, end
        self.docs, self.doc_times = docs, [t for t, _ in docs]
        self.approvals = sorted(
            (t, e.event_id)
            for e in events
            for name, t in e.approvals.items()
            if name == plan.vm.VmName
        )
        self.heartbeat_ms = heartbeat_ms
        self.coarse = coarse  # (until, interval): heartbeats before ``until`` every ``interval``
        self.rng = random.Random(seed)
        self.state = tracker.TrackerState()
        self.spool = _Spool()
        self.last_beat: tuple[int, str] | None = None
        self._open_for: object = None
        self._open: tuple[OpenEvent, ...] = ()

    def doc_at(self, t: int) -> Document:
        return self.docs[bisect_right(self.doc_times, t) - 1][1]

    def rows(self) -> Iterator[tuple[str, dict[str, Any]]]:
        """("record" | "heartbeat", row) for every copy Log Analytics receives, run by run."""
        for i, run in enumerate(self.plan.runs):
            nxt = self.plan.runs[i + 1].start if i + 1 < len(self.plan.runs) else None
            yield from self._run(run, nxt)

    def _run(self, run: Run, next_start: int | None) -> Iterator[tuple[str, dict[str, Any]]]:
        stop = min(run.end, self.end) if run.end is not None else self.end
        vm = replace(self.vm, AgentVersion=run.version)
        self.spool = _Spool(self.spool.pending)
        if self.state.last_ok_ms is not None:
            self.state = tracker.restarted(self.state)
        first_poll = run.start + POLL
        yield from self._beat("start", run, run.start, vm, next_start)
        beats = self._beat_times(run.start, stop)
        steps = sorted(
            [(t, 1, "poll") for t in self._poll_moments(first_poll, stop)]
            + [(t, 2, eid) for t, eid in self.approvals if run.start < t < stop]
            + [(t, 3, "beat") for t in beats]
        )
        for t, kind, what in steps:
            if kind == 1:
                yield from self._poll(t, vm, run, next_start)
            elif kind == 2:
                obs = tracker.approved(self.state, t, [what], vm)
                self.state = obs.state
                yield from self._emit(
                    "record", [r.as_dict() for r in obs.records], t, run, next_start
                )
            else:
                yield from self._beat("periodic", run, t, vm, next_start)
        if run.end is not None and run.end <= self.end and run.clean:
            yield from self._beat("stop", run, run.end, vm, next_start)

    def _poll_moments(self, first: int, stop: int) -> list[int]:
        """The first poll of the run and the first poll at or after each document change."""
        out = [first]
        for t in self.doc_times:
            if first < t < stop:
                tick = first + -(-(t - first) // POLL) * POLL
                if tick < stop and tick != out[-1]:
                    out.append(tick)
        return out

    def _poll(
        self, t: int, vm: Any, run: Run, next_start: int | None
    ) -> Iterator[tuple[str, dict[str, Any]]]:
        doc = self.doc_at(t)
        if (
            self.state.last_ok_ms is not None
            and t - POLL > self.state.last_ok_ms
            and not self.state.restarted
        ):
            # the unchanged poll just before: what bounds the change (UncertaintySeconds)
            self.state = tracker.observe(self.state, t - POLL, self.doc_at(t - POLL), vm).state
        obs = tracker.observe(self.state, t, doc, vm)
        self.state = obs.state
        yield from self._emit("record", [r.as_dict() for r in obs.records], t, run, next_start)

    def _beat_times(self, start: int, stop: int) -> list[int]:
        out: list[int] = []
        t = start
        while True:
            every = (
                self.heartbeat_ms if self.coarse is None or t >= self.coarse[0] else self.coarse[1]
            )
            t += every + self.rng.randint(1, 40)  # the loop's drift
            if t >= stop:
                return out
            out.append(t)

    def _beat(
        self, reason: str, run: Run, t: int, vm: Any, next_start: int | None
    ) -> Iterator[tuple[str, dict[str, Any]]]:
        self.spool.advance(t)
        snap = self._snapshot(run, t)
        row = snap.heartbeat(reason, vm, iso(t), self._uuid4()).as_dict()
        self.last_beat = (t, reason)
        yield from self._emit("heartbeat", [row], t, run, next_start)

    def _snapshot(self, run: Run, t: int) -> Snapshot:
        first_poll = run.start + POLL
        polls = 0 if t < first_poll else (t - first_poll) // POLL + 1
        errors = sum(
            max(0, (min(t, w.end) - max(first_poll, w.start)) // POLL + 1) // w.every
            for w in self.plan.poll_errors
            if w.start <= t and w.end > first_poll
        )
        failed = sum(
            max(0, (min(t, o.end) - max(run.start, o.start)) // o.retry)
            for o in self.plan.outages
            if o.start < t
        )
        state = self.state
        return Snapshot(
            uptime_seconds=(t - run.start + IDENTITY_READ) / 1000,
            polls=polls,
            poll_errors=errors,
            last_poll_latency_ms=round(self.rng.uniform(0.8, 6.0), 3),
            last_incarnation=state.last_incarnation,
            open_events=self._open_events(state),
            delivered=self.spool.delivered,
            failed_deliveries=failed,
            dropped=self.spool.dropped,
            spool_depth=len(self.spool.pending),
        )

    def _open_events(self, state: tracker.TrackerState) -> tuple[OpenEvent, ...]:
        """The heartbeat's OpenEventList, as the agent builds it (cached per tracker state)."""
        if self._open_for is not state.events:
            self._open_for = state.events
            self._open = tuple(
                OpenEvent(
                    eid,
                    te.view.event_type,
                    te.view.status,
                    te.view.source,
                    format_ms(te.view.not_before_ms),
                    te.view.duration,
                    self.vm.affects(te.view.resources),
                )
                for eid, te in state.events.items()
            )
        return self._open

    def _uuid4(self) -> str:
        h = f"{self.rng.getrandbits(128) & _V4_MASK | _V4_BITS:032x}"
        return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"

    def _emit(
        self, kind: str, rows: list[dict[str, Any]], t: int, run: Run, next_start: int | None
    ) -> Iterator[tuple[str, dict[str, Any]]]:
        for row in rows:
            at = self._ingestion(t, run, next_start)
            if at is None:
                continue
            heapq.heappush(self.spool.pending, at)
            row[INGESTION_COLUMN] = iso(at)
            yield kind, row
            if self.rng.random() * self.plan.duplicate_every < 1:
                late = at + self.rng.randint(20 * 60, 6 * 3600) * SECOND
                if late <= self.end:
                    yield kind, {**row, INGESTION_COLUMN: iso(late)}

    def _ingestion(self, t: int, run: Run, next_start: int | None) -> int | None:
        """When a row created at ``t`` is ingested (None: dropped, or never sent)."""
        lo, hi = self.plan.lag
        at = t + int(lo + self.rng.random() * (hi - lo)) // SECOND * SECOND
        for o in self.plan.outages:
            if o.start <= t < o.end and o.slowdown is not None:
                at += int((t - o.start) * o.slowdown)
            elif o.start <= t < o.end:
                if o.drop_after is not None and len(self.spool.pending) >= o.drop_after:
                    self.spool.dropped += 1
                    return None
                at = max(at, o.end + self.rng.randint(1, 30) * SECOND)
        if run.end is not None and at > run.end:
            if run.clean and not any(o.start <= run.end < o.end for o in self.plan.outages):
                return run.end + self.rng.randint(1, 5) * SECOND  # drained before exiting
            if next_start is None:
                return None  # the VM never came back: its spool is lost
            at = next_start + self.rng.randint(2, 20) * SECOND
        return at  # may be after the data's end: not visible yet at that moment
