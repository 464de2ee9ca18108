"""Observations in, committed records out: the tracker and the store, wired once.

``run`` and ``replay`` both feed a ``Recorder``, so a trace replays through exactly the code and
persistence the agent uses. An unchanged answer (byte-identical to the last one) costs a
comparison; only a changed one is parsed and diffed.
"""

from __future__ import annotations

import functools
import json
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from . import logs, tracker
from .errors import BadDocument
from .imds.parse import parse_body, parse_json
from .model import Heartbeat, LifecycleRecord, VmIdentity
from .outbox import OutboxRow, Store
from .timefmt import format_ms

STATE_KEY = "tracker"
REPEAT_LOG_MS = 60_000  # a repeating problem is logged again at most this often


@dataclass(slots=True)
class PollStats:
    polls: int = 0
    errors: int = 0
    last_error: str | None = None
    last_ok_ms: int | None = None  # time of the last successful poll
    last_ok: bool = False  # whether the last poll succeeded


_UNSET: Any = object()  # answer(key=...) not given
_F = TypeVar("_F", bound=Callable[..., Any])


def _locked(method: _F) -> _F:
    """The poll loop and the approvals thread (``approved``) share a recorder: one at a time."""
    @functools.wraps(method)
    def wrapper(self: Recorder, *args: Any, **kwargs: Any) -> Any:
        with self._lock:
            return method(self, *args, **kwargs)
    return wrapper  # type: ignore[return-value]


def body_key(body: Any, parsed: bool) -> Any:
    """What identifies an answer body for the "unchanged" shortcut."""
    if not parsed:
        return body
    try:
        return json.dumps(body, separators=(",", ":"))
    except (TypeError, ValueError, RecursionError):  # not JSON: never "the same"
        return None


class Recorder:
    def __init__(self, store: Store, vm: VmIdentity, *,
                 on_records: Callable[[list[LifecycleRecord]], None] | None = None,
                 logger: logging.Logger | None = None) -> None:
        self.store = store
        self.vm = vm
        self.on_records = on_records
        self.log = logger or logs.get("tracker")
        self.stats = PollStats()
        self._lock = threading.RLock()
        self._state = self._load_state()
        self._pending_ok: int | None = None  # time of the last unchanged poll, not yet folded in
        self._last_body: Any = None  # the last answer body that was processed, as received
        self._problem: str | None = None  # the bad observation now repeating, if any
        self._problem_count = 0
        self._problem_logged = 0

    def _load_state(self) -> tracker.TrackerState:
        """A saved state means the agent ran before: the first diff spans the downtime. A state
        that cannot be read is logged and replaced by a fresh one (events still open are then
        seen anew: the same RecordIds, so downstream drops the repeats)."""
        try:
            saved = self.store.load(STATE_KEY)
            return tracker.restarted(tracker.state_from_json(saved)) if saved else tracker.TrackerState()
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            logs.event(self.log, logging.CRITICAL, "saved tracker state unreadable; starting fresh",
                       error=f"{type(exc).__name__}: {exc}")
            return tracker.TrackerState()

    @property
    @_locked
    def state(self) -> tracker.TrackerState:
        """The tracker state, with the time of the last unchanged poll folded in (lazily: an
        unchanged poll, the common case, then costs no new state object)."""
        if self._pending_ok is not None:
            self._state = replace(self._state, last_ok_ms=self._pending_ok, restarted=False)
            self._pending_ok = None
        return self._state

    @state.setter
    @_locked
    def state(self, value: tracker.TrackerState) -> None:
        self._state = value
        self._pending_ok = None

    @_locked
    def answer(self, at_ms: int, status: int, body: bytes | str | Any, *, parsed: bool = False,
               key: Any = _UNSET) -> list[LifecycleRecord]:
        """A poll at ``at_ms`` was answered (``parsed``: ``body`` is decoded JSON, as in traces).

        ``key``: ``body_key(body, parsed)`` when the caller already has it (replay reuses one
        per decoded trace body instead of serialising every line's)."""
        self.stats.polls += 1
        if status != 200:
            return self.bad(at_ms, f"HTTP {status}", count_poll=False)
        # Decoded JSON is compared as JSON text: in Python True == 1 and 5.0 == 5, so a dict
        # comparison would pass a wrongly typed (bad) document off as the last good one.
        same = body_key(body, parsed) if key is _UNSET else key
        if same is not None and same == self._last_body and self._state.last_doc is not None:
            self._pending_ok = at_ms
            self.stats.last_ok_ms, self.stats.last_ok = at_ms, True
            if self._problem is not None:
                self._recovered(at_ms)
            return []
        try:
            doc = parse_json(body) if parsed else parse_body(body)
        except BadDocument as exc:
            return self.bad(at_ms, str(exc), count_poll=False)
        if self._problem is not None:
            self._recovered(at_ms)
        obs = tracker.observe(self.state, at_ms, doc, self.vm)
        for eid in obs.ignored:
            logs.event(self.log, logging.WARNING, "event reappeared after it was removed; ignored",
                       EventId=eid, DocumentIncarnation=doc.incarnation)
        for eid in obs.unrecorded:
            logs.event(self.log, logging.WARNING, "event changed under an incarnation already seen; "
                       "no Updated record (its RecordId is taken)", EventId=eid,
                       DocumentIncarnation=doc.incarnation)
        if obs.changed and not self._commit(obs):
            self._last_body = None  # diff again at the next poll
            return []
        self.state = obs.state
        self._last_body = same
        self.stats.last_ok_ms, self.stats.last_ok = at_ms, True
        self._emit(obs.records)
        return obs.records

    @_locked
    def bad(self, at_ms: int, reason: str, *, count_poll: bool = True) -> list[LifecycleRecord]:
        """A poll failed (no answer, or not a usable document): counted and logged, no state
        change. A problem that repeats is logged when it starts, then at most once a minute."""
        if count_poll:
            self.stats.polls += 1
        self.stats.errors += 1
        self.stats.last_error = reason
        self.stats.last_ok = False
        if reason != self._problem:
            self._problem, self._problem_count, self._problem_logged = reason, 1, at_ms
            logs.event(self.log, logging.WARNING, "bad observation", reason=reason, at=format_ms(at_ms))
        else:
            self._problem_count += 1
            if at_ms - self._problem_logged >= REPEAT_LOG_MS:
                self._problem_logged = at_ms
                logs.event(self.log, logging.WARNING, "bad observation", reason=reason,
                           at=format_ms(at_ms), repeated=self._problem_count)
        return []

    def _recovered(self, at_ms: int) -> None:
        if self._problem_count > 1:
            logs.event(self.log, logging.INFO, "polls answered again", after_failures=self._problem_count,
                       last_reason=self._problem, at=format_ms(at_ms))
        self._problem, self._problem_count = None, 0

    @_locked
    def enqueue(self, row: Heartbeat) -> bool:
        """Commit a row that is not a tracker record (a heartbeat) with the current state."""
        rows = [OutboxRow.of(row, self.vm.partition_key)]
        return self._persist(tracker.state_to_json(self.state), rows) is not None

    @_locked
    def approved(self, at_ms: int, event_ids: list[str]) -> list[LifecycleRecord]:
        obs = tracker.approved(self.state, at_ms, event_ids, self.vm)
        if obs.records and self._commit(obs):
            self.state = obs.state
            self._emit(obs.records)
            return obs.records
        return []

    @_locked
    def checkpoint(self) -> None:
        """Save the time of the last successful poll (it bounds the next record's uncertainty)."""
        try:
            self.store.save(STATE_KEY, tracker.state_to_json(self.state))
        except Exception as exc:  # noqa: BLE001 - a full disk must not stop polling
            logs.event(self.log, logging.ERROR, "cannot save state", error=str(exc))

    def _commit(self, obs: tracker.Observed) -> bool:
        rows = [OutboxRow.of(r, self.vm.partition_key) for r in obs.records]
        if self._persist(tracker.state_to_json(obs.state), rows) is None:
            # Counted as a failed poll, so status and heartbeats show it: nothing was recorded.
            self.stats.errors += 1
            self.stats.last_error = "cannot persist records (see the log)"
            self.stats.last_ok = False
            return False
        return True

    def _persist(self, state: dict, rows: list[OutboxRow]) -> int | None:
        """Commit; returns how many old records the spool bound dropped, or None on failure."""
        try:
            dropped = self.store.commit(STATE_KEY, state, rows)
        except Exception as exc:  # noqa: BLE001 - sqlite3.Error, OSError: disk full, read-only...
            logs.event(self.log, logging.ERROR,
                       "cannot persist records; will diff again at the next poll",
                       error=str(exc), records=len(rows))
            return None
        if dropped:
            logs.event(self.log, logging.ERROR, "spool bound reached: dropped the oldest records",
                       dropped=dropped, max_bytes=self.store.max_bytes)
        return dropped

    def _emit(self, records: list[LifecycleRecord]) -> None:
        for r in records:
            logs.event(self.log, logging.INFO, "record", Phase=r.Phase, EventId=r.EventId,
                       EventType=r.EventType, EventStatus=r.EventStatus, Outcome=r.Outcome,
                       NotBefore=r.NotBefore, AffectsThisVm=r.AffectsThisVm,
                       NoticeSeconds=r.NoticeSeconds, StartDelaySeconds=r.StartDelaySeconds,
                       SinceStartedSeconds=r.SinceStartedSeconds,
                       UncertaintySeconds=r.UncertaintySeconds,
                       DocumentIncarnation=r.DocumentIncarnation, RecordId=r.RecordId)
        if self.on_records and records:
            self.on_records(records)
