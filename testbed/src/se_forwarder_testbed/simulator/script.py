"""The simulated IMDS's clock: the scenario or trace played forward, one published document per
change, at the exact moment the script says (the change log keeps that moment)."""

from __future__ import annotations

import socket
from collections.abc import Iterable
from typing import Any

from .scenario import EventState
from .state import SimulatorState
from .tracescript import Observation
from .wire import (
    ChangeRecord,
    Fault,
    rfc1123,
)


class ScriptClock(SimulatorState):
    """The clock half of ``Simulator``: the scenario or trace played forward on its state."""

    def scenario_time(self) -> float:
        """Scenario seconds since start (real seconds times speed)."""
        return (self.clock.monotonic() - self._t0_mono) * self.speed

    def wall_time_of(self, scenario_seconds: float) -> float:
        """The real epoch time a scenario time maps to (how NotBefore is rendered)."""
        return self._t0_wall + scenario_seconds / self.speed

    # -- internals: the clock -------------------------------------------------------------

    def _track(self, conn: socket.socket, add: bool) -> None:
        with self._cond:
            if add:
                self._conns.add(conn)
            else:
                self._conns.discard(conn)

    def _log_change(
        self,
        incarnation: int | None = None,
        events: Iterable[dict[str, Any]] = (),
        scenario_time: float | None = None,
    ) -> None:
        """Record (under the lock) that a new document is visible from this instant."""
        inc = self._incarnation if self.trace is None else incarnation
        evs = tuple(dict(e) for e in (self._events if self.trace is None else events))
        mono = self.clock.monotonic()
        if scenario_time is None:
            scenario_time = (mono - self._t0_mono) * self.speed
        self._changes.append(ChangeRecord(inc, self.clock.wall_seconds(), mono, scenario_time, evs))

    def _wire(self, st: EventState) -> dict[str, Any]:
        return {
            "EventId": st.event_id,
            "EventStatus": st.status,
            "EventType": st.event_type,
            "ResourceType": st.resource_type,
            "Resources": list(st.resources),
            "NotBefore": "" if st.not_before is None else rfc1123(self.wall_time_of(st.not_before)),
            "Description": st.description,
            "EventSource": st.source,
            "DurationInSeconds": st.duration,
        }

    def _advance(self) -> None:
        """Bring the published document up to now (idempotent; call with the lock held)."""
        if self._server is None and not self._t0_mono:
            return
        t = (self.clock.monotonic() - self._t0_mono) * self.speed
        while (
            self._faults_fired < len(self._scenario_faults)
            and self._scenario_faults[self._faults_fired].at <= t
        ):
            f = self._scenario_faults[self._faults_fired]
            self._faults.append(Fault(f.kind, f.count, f.delay, None))
            self._faults_fired += 1
        if self.trace is not None:
            while (
                self._trace_index + 1 < len(self.trace)
                and self.trace[self._trace_index + 1].offset <= t
            ):
                prev = self.trace[self._trace_index] if self._trace_index >= 0 else None
                self._trace_index += 1
                obs = self.trace[self._trace_index]
                if prev is None or (prev.status, prev.body, prev.text, prev.error) != (
                    obs.status,
                    obs.body,
                    obs.text,
                    obs.error,
                ):
                    body = obs.body if isinstance(obs.body, dict) else {}
                    inc = body.get("DocumentIncarnation")
                    served = body.get("Events")
                    evs = served if isinstance(served, list) else []
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
        times = [
            x for tl in self._timelines for x in tl.change_times(self._approvals_scn) if x > after
        ]
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
            self._approvals_wall.setdefault(eid, self.clock.wall_seconds())
            self._approvals_scn.setdefault(eid, now_scn)
        self._cond.notify_all()
        return True

    def _trace_current(self) -> Observation:
        if self.trace is None:
            raise RuntimeError("the simulator plays no trace")
        return self.trace[self._trace_index]

    # -- internals: HTTP ------------------------------------------------------------------
