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
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

from .. import logs, tracker
from ..clock import SYSTEM, Clock
from ..errors import BadDocument
from ..imds.azure_clock import AzureClock
from ..imds.parse import parse_body, parse_json
from ..model import Heartbeat, LifecycleRecord, VmIdentity
from ..outbox import OutboxRow, Store
from ..outbox.drops import Dropped
from ..outbox.space import is_disk_full
from ..outbox.store import TRACKER_KEY
from ..timefmt import format_ms
from .doc_problems import DocumentProblems
from .hold import Hold

STATE_KEY = TRACKER_KEY
REPEAT_LOG_MS = 60_000  # a repeating problem is logged again at most this often
KEEP_BODY_BYTES = 64 * 1024  # a larger answer is remembered by its digest
MAX_KINDS_LOGGED = 8  # distinct kinds of failure logged at once within one series
# The wall clock moved this much against the monotonic one since the last observation: it was
# stepped (NTP, a host resync); time did not pass that fast.
STEP_MS = 500


@dataclass(slots=True)
class PollStats:
    """The polls' counters; the ones ``health.Snapshot`` declares reach it by name."""

    polls: int = 0
    poll_errors: int = 0
    malformed_events: int = 0  # doc_problems.py: once per EventId and incarnation
    truncated_values: int = 0  # values cut to the per-value limit
    held_records: int = 0  # records that waited for the VM's identity (hold.py)
    persist_failures: int = 0  # commits that failed (disk full, read-only, I/O error)
    persist_error: str | None = None  # the failure now going on, if any
    disk_full: bool = False
    records: Counter[tuple[str, str]] = field(default_factory=Counter)  # (Phase, EventType)
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
    """What identifies an answer body for the "unchanged" shortcut: the body itself, or for a
    large one its digest (a 20 MB document must not be kept in memory for as long as it is
    served)."""
    if parsed:
        try:
            body = json.dumps(body, separators=(",", ":"))
        except (TypeError, ValueError, RecursionError):  # not JSON: never "the same"
            return None
    if not isinstance(body, (bytes, bytearray, str)) or len(body) <= KEEP_BODY_BYTES:
        return body
    import hashlib  # here: only a document over 64 KiB needs it

    data = body.encode("utf-8", "surrogatepass") if isinstance(body, str) else bytes(body)
    return ("blake2b", len(data), hashlib.blake2b(data).digest())


class Recorder:
    def __init__(
        self,
        store: Store,
        vm: VmIdentity,
        *,
        on_records: Callable[[list[LifecycleRecord]], None] | None = None,
        logger: logging.Logger | None = None,
        shared: bool = True,
        clock: Clock = SYSTEM,
        hold_seconds: float = 0.0,
    ) -> None:
        """``shared=False``: one thread only (replay), so ``answer`` skips the lock the agent's
        approvals thread needs: on a trace it is taken per line and cost a third of the time.
        ``hold_seconds``: records wait this long at most for the VM's identity (hold.py)."""
        self.store = store
        self.clock = clock
        self.vm = vm
        self.on_records = on_records
        self.log = logger or logs.get("tracker")
        self.stats = PollStats()
        self._lock = threading.RLock()
        self._state = self._load_state()
        self._pending_ok: int | None = None  # time of the last unchanged poll, not yet folded in
        self._last_body: Any = None  # the last answer body that was processed, as received
        self._problem: str | None = None  # the last failure of the series now going on, if any
        self._problem_count = 0  # failures in that series
        self._problem_logged = 0
        self._kinds: set[str] = set()  # kinds of failure already logged in the series
        self._problems = DocumentProblems(self.stats, self.log)
        self._persist_logged = 0.0
        self._seen: tuple[int, float] | None = None  # (wall ms, monotonic s) of the last now()
        self.hold = Hold(store, clock, hold_seconds)
        self.azure = AzureClock()  # NotBefore is Azure's time: compared on Azure's clock
        if not shared:
            self.answer = self._answer  # type: ignore[method-assign]

    def _load_state(self) -> tracker.TrackerState:
        """A saved state means the agent ran before: the first diff spans the downtime. A state
        that cannot be read is logged and replaced by a fresh one (events still open are then
        seen anew: the same RecordIds, so downstream drops the repeats)."""
        try:
            saved = self.store.load(STATE_KEY)
            return (
                tracker.restarted(tracker.state_from_json(saved))
                if saved
                else tracker.TrackerState()
            )
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            logs.event(
                self.log,
                logging.CRITICAL,
                "saved tracker state unreadable; starting fresh",
                error=f"{type(exc).__name__}: {exc}",
            )
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
    def now(self) -> int:
        """The wall-clock time of an observation made now (epoch ms: its TimeGenerated).

        A step of the wall clock since the last observation is told from time passing by the
        monotonic clock: the times the tracker remembers move with the step
        (``tracker.shifted``), so every delta stays the real time elapsed, and the step is
        logged once. At the first observation of a run, a wall clock behind the latest time the
        saved state remembers was stepped back while the agent was down, by an unknown amount:
        the remembered times move back to now, so no delta is negative."""
        wall, mono = self.clock.wall_ms(), self.clock.monotonic()
        first = self._seen is None
        if self._seen is None:
            latest = tracker.latest_ms(self.state)
            step = min(0, wall - latest) if latest is not None else 0
        else:
            step = (wall - self._seen[0]) - round((mono - self._seen[1]) * 1000)
        self._seen = (wall, mono)
        if step and (first or abs(step) >= STEP_MS):
            self._stepped(step, first)
        if self.hold.due(self.vm):
            self.release_held()
        return wall

    def _stepped(self, step_ms: int, first: bool) -> None:
        self.state = tracker.shifted(self.state, step_ms)
        self.azure.stepped(step_ms)
        if self.stats.last_ok_ms is not None:
            self.stats.last_ok_ms += step_ms
        self._problem_logged += step_ms
        if abs(step_ms) >= STEP_MS:
            logs.event(
                self.log,
                logging.WARNING,
                "wall clock is behind the times already recorded (stepped back while the "
                "agent was down); they are moved back to now"
                if first
                else "wall clock stepped; the times already recorded move with it, so deltas "
                "stay the real time elapsed",
                by_seconds=round(step_ms / 1000, 3),
            )

    def answer(
        self,
        at_ms: int,
        status: int,
        body: bytes | str | Any,
        *,
        parsed: bool = False,
        key: Any = _UNSET,
        date: bytes | None = None,
    ) -> list[LifecycleRecord]:
        """A poll at ``at_ms`` was answered (``parsed``: ``body`` is decoded JSON, as in traces).

        ``key``: ``body_key(body, parsed)`` when the caller already has it (replay reuses one
        per decoded trace body instead of serialising every line's). ``date``: the answer's
        Date header (Azure's clock)."""
        with self._lock:
            return self._answer(at_ms, status, body, parsed, key, date)

    def _answer(
        self,
        at_ms: int,
        status: int,
        body: bytes | str | Any,
        parsed: bool = False,
        key: Any = _UNSET,
        date: bytes | None = None,
    ) -> list[LifecycleRecord]:
        self.stats.polls += 1
        self.azure.heard(date, at_ms)
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
        self._problems.served(doc)
        obs = tracker.observe(self.state, at_ms, doc, self.vm, self.azure.offset_ms)
        self._problems.unrecorded(obs, doc.incarnation)
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
        change. A series of failures is logged when it starts and at each new kind of failure in
        it (at most ``MAX_KINDS_LOGGED``), then once a minute with the count, and when it ends."""
        if count_poll:
            self.stats.polls += 1
        self.stats.poll_errors += 1
        self.stats.last_error = reason
        self.stats.last_ok = False
        self._problem_count += 1
        kind = reason.split(":", 1)[0]
        fresh = kind not in self._kinds and len(self._kinds) < MAX_KINDS_LOGGED
        if self._problem_count == 1 or fresh or at_ms - self._problem_logged >= REPEAT_LOG_MS:
            self._kinds.add(kind)
            self._problem_logged = at_ms
            logs.event(
                self.log,
                logging.WARNING,
                "bad observation",
                reason=reason,
                at=format_ms(at_ms),
                repeated=self._problem_count,
            )
        self._problem = reason
        return []

    def _recovered(self, at_ms: int) -> None:
        if self._problem_count > 1:
            logs.event(
                self.log,
                logging.INFO,
                "polls answered again",
                after_failures=self._problem_count,
                last_reason=self._problem,
                at=format_ms(at_ms),
            )
        self._problem, self._problem_count = None, 0
        self._kinds = set()

    @_locked
    def enqueue(self, row: Heartbeat, meta: dict[str, Any] | None = None) -> bool:
        """Commit a row that is not a tracker record (a heartbeat) with the current state, and
        ``meta`` (what the heartbeat has reported) in the same transaction."""
        rows = [OutboxRow.of(row, self.vm.partition_key)]
        return self._persist(tracker.state_to_json(self.state), rows, meta) is not None

    @_locked
    def approved(self, at_ms: int, event_ids: list[str]) -> list[LifecycleRecord]:
        obs = tracker.approved(self.state, at_ms, event_ids, self.vm)
        if obs.records and self._commit(obs):
            self.state = obs.state
            self._emit(obs.records)
            return obs.records
        return []

    @_locked
    def acted(self, event_id: str, text: str) -> None:
        """What the policy did for an open event: its later records carry it (``Acted``)."""
        state = tracker.acted(self.state, event_id, text)
        if state is not self._state:
            self.state = state
            self._persist(tracker.state_to_json(state), [])

    @_locked
    def checkpoint(self) -> None:
        """Save the time of the last successful poll (it bounds the next record's uncertainty)."""
        try:
            self.store.save(STATE_KEY, tracker.state_to_json(self.state))
        except Exception as exc:
            logs.event(self.log, logging.ERROR, "cannot save state", error=str(exc))

    @_locked
    def identify(self, vm: VmIdentity) -> None:
        """The VM's identity (the instance document answered): held records go with it."""
        self.vm = vm
        if self.hold.due(vm):
            self.release_held()

    @_locked
    def release_held(self) -> None:
        """Held records to the outbox with the identity as it stands (hold.py), then on."""
        records, rows, keys = self.hold.release(self.vm)
        waited = round(self.hold.waited(), 3)
        if (
            records
            and self._persist(tracker.state_to_json(self.state), rows, forget=keys) is not None
        ):
            self.hold.released(self.vm)
            if not self.vm.IdentityKnown:
                logs.event(
                    self.log,
                    logging.WARNING,
                    "instance document still unavailable: "
                    "records sent with IdentityKnown false (no VmId; AffectsThisVm "
                    "null unless agent.vm_name is set)",
                    records=len(records),
                    held_seconds=waited,
                )
            else:
                logs.event(
                    self.log,
                    logging.INFO,
                    "held records go on with the VM's identity",
                    records=len(records),
                    held_seconds=waited,
                )
            self._emit(records)

    def _commit(self, obs: tracker.Observed) -> bool:
        held = self.hold.active(self.vm) and bool(obs.records)
        rows = [] if held else [OutboxRow.of(r, self.vm.partition_key) for r in obs.records]
        entries = self.hold.keep(obs.records) if held else None
        if self._persist(tracker.state_to_json(obs.state), rows, entries) is None:
            # Counted as a failed poll, so status and heartbeats show it: nothing was recorded.
            self.stats.poll_errors += 1
            self.stats.last_error = "cannot persist records (see the log)"
            self.stats.last_ok = False
            return False
        if entries:
            if not self.hold.waiting:  # a delay starts: said once, each record counted
                logs.event(
                    self.log,
                    logging.INFO,
                    "records held until the instance document answers",
                    records=len(entries),
                    at_most_seconds=self.hold.seconds,
                )
            self.stats.held_records += len(entries)
            self.hold.kept(entries)
        return True

    def _persist(
        self,
        state: dict[str, Any],
        rows: list[OutboxRow],
        meta: dict[str, Any] | None = None,
        forget: list[str] | None = None,
    ) -> Dropped | None:
        """Commit; returns what the spool bound dropped, or None on failure."""
        try:
            dropped = self.store.commit(STATE_KEY, state, rows, meta, forget or ())
        except Exception as exc:
            self._persist_failed(exc, len(rows))
            return None
        if self.stats.persist_error is not None:
            logs.event(
                self.log,
                logging.WARNING,
                "state directory writable again",
                failures=self.stats.persist_failures,
            )
            self.stats.persist_error, self.stats.disk_full = None, False
        if dropped.removed:
            # lost: counted now; sending: lost only if their sink does not confirm them (the
            # delivery worker logs those it does not)
            logs.event(
                self.log,
                logging.ERROR,
                "spool bound reached: dropped the oldest records",
                dropped=dropped.lost,
                removed=dropped.removed,
                sending=dropped.sending,
                heartbeats=dropped.heartbeats,
                max_bytes=self.store.max_bytes,
            )
        return dropped

    def _persist_failed(self, exc: Exception, rows: int) -> None:
        """Counted every time, logged when it starts and then once a minute (a full disk fails
        every poll: one line a second would fill what is left of it)."""
        first = self.stats.persist_error is None
        self.stats.persist_failures += 1
        self.stats.persist_error = f"{type(exc).__name__}: {exc}"
        self.stats.disk_full = is_disk_full(exc)
        now = self.clock.monotonic()
        if first or now - self._persist_logged >= REPEAT_LOG_MS / 1000:
            self._persist_logged = now
            logs.event(
                self.log,
                logging.ERROR,
                "disk full: cannot persist records; will diff again at the next poll"
                if self.stats.disk_full
                else "cannot persist records; will diff again at the next poll",
                error=self.stats.persist_error,
                records=rows,
                failures=self.stats.persist_failures,
            )

    def _emit(self, records: list[LifecycleRecord]) -> None:
        records = [r for r in records if not self.hold.holds(r)]  # told when released
        for r in records:
            self.stats.records[(r.Phase, r.EventType)] += 1
            logs.event(
                self.log,
                logging.INFO,
                "record",
                Phase=r.Phase,
                EventId=r.EventId,
                EventType=r.EventType,
                EventStatus=r.EventStatus,
                Outcome=r.Outcome,
                NotBefore=r.NotBefore,
                AffectsThisVm=r.AffectsThisVm,
                NoticeSeconds=r.NoticeSeconds,
                StartDelaySeconds=r.StartDelaySeconds,
                SinceStartedSeconds=r.SinceStartedSeconds,
                UncertaintySeconds=r.UncertaintySeconds,
                DocumentIncarnation=r.DocumentIncarnation,
                RecordId=r.RecordId,
            )
        if self.on_records and records:
            self.on_records(records)
