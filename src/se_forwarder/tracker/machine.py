"""The lifecycle tracker: a pure state machine (record-contract.md §2).

``observe(state, at_ms, document, vm)`` returns the next state and the records the change
produced; nothing here reads a clock, touches a file or mutates its input. The agent commits the
returned state and records together, so a crash either keeps both or neither, and the next poll
is diffed against whatever was committed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType

from ..model import (
    ApprovedBy,
    Document,
    EventStatus,
    EventView,
    LifecycleRecord,
    Outcome,
    Phase,
    VmIdentity,
    record_id,
)
from ..timefmt import format_ms, seconds_between

CANCEL_WINDOW_MS = 60_000  # a removal within 60 s of a poll that saw it Scheduled: Cancelled
TOMBSTONE_MS = 7 * 86_400_000  # a removed EventId that reappears within 7 days is ignored
MAX_TOMBSTONES = 1024
MAX_INCARNATIONS = 32  # (EventId, incarnation) pairs remembered per event


@dataclass(frozen=True, slots=True)
class TrackedEvent:
    view: EventView  # content as last seen
    first_seen_ms: int
    started_ms: int | None = None
    last_not_before_ms: int | None = None  # the last NotBefore it had (it goes "" when Started)
    incarnations: tuple[int, ...] = ()  # incarnations in which it was already considered
    approved: bool = False
    approved_by: str | None = None  # an ``ApprovedBy``, fixed when it is first seen Started
    acted: str | None = None  # what the policy did for it so far (the agent's actions say)


@dataclass(frozen=True, slots=True)
class TrackerState:
    events: Mapping[str, TrackedEvent] = field(default_factory=lambda: MappingProxyType({}))
    last_doc: Document | None = None
    last_ok_ms: int | None = None  # the previous successful poll
    restarted: bool = False  # the agent restarted since the last successful poll
    tombstones: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))
    # Whose records these are, in RecordIds: fixed at the first record, a fallback (no instance
    # document yet) replaced by the VmId once it answers, so ids are the ones a restart makes.
    vm_key: str | None = None

    @property
    def last_incarnation(self) -> int | None:
        return self.last_doc.incarnation if self.last_doc else None


@dataclass(frozen=True, slots=True)
class Observed:
    state: TrackerState
    records: list[LifecycleRecord]
    ignored: tuple[str, ...] = ()  # EventIds that reappeared after their Removed (anomalies)
    unrecorded: tuple[str, ...] = ()  # changed under an incarnation already considered

    @property
    def changed(self) -> bool:
        """Whether the state differs in more than the time of the last poll."""
        return bool(self.records) or self._doc_changed

    _doc_changed: bool = False


def _kept(state: TrackerState, vm: VmIdentity) -> str:
    """The key: fixed at the first record; one made before the instance document answered (the
    configured name, the host name) gives way to the VmId once it has, the key a restart makes
    (records held meanwhile are given the VmId's ids when they are released, hold.py)."""
    if (
        vm.IdentityKnown
        and state.vm_key != vm.key
        and state.vm_key in {vm.VmName, vm.Computer, "unknown"}
    ):
        return vm.key
    return state.vm_key or vm.key


def restarted(state: TrackerState) -> TrackerState:
    """The agent started again with ``state`` from disk: the next diff spans the downtime."""
    return replace(state, restarted=True)


def observe(
    state: TrackerState, at_ms: int, doc: Document, vm: VmIdentity, azure_offset_ms: int = 0
) -> Observed:
    """A successful poll at ``at_ms`` served ``doc``. ``azure_offset_ms``: Azure's clock minus
    the VM's when the VM's is off (imds/azure_clock.py): NotBefore, Azure's time, is compared
    with the poll's time on Azure's clock."""
    if doc == state.last_doc:  # same incarnation and content: nothing to do
        key = _kept(state, vm) if state.vm_key else None  # the VmId's, once it answers
        return Observed(replace(state, last_ok_ms=at_ms, restarted=False, vm_key=key), [])

    gap_ms = None if state.last_ok_ms is None else at_ms - state.last_ok_ms
    key = _kept(state, vm)
    ctx = _Ctx(at_ms, doc.incarnation, vm, gap_ms, key, azure_offset_ms)
    events = dict(state.events)
    tombstones = dict(state.tombstones)
    records: list[LifecycleRecord] = []
    ignored: list[str] = []
    unrecorded: list[str] = []
    for view in doc.events:
        eid = view.event_id
        if eid in tombstones:
            ignored.append(eid)
            continue
        te = events.get(eid)
        if te is None:
            events[eid] = _first_seen(ctx, view, records)
            continue
        events[eid], unchanged_update = _seen_again(ctx, te, view, records)
        if unchanged_update:
            unrecorded.append(eid)

    # Served malformed: kept as tracked, never Removed for it; an event without a usable EventId
    # may be any of them: the document removes none.
    present = {v.event_id for v in doc.events} | set(doc.held)
    for eid, te in state.events.items():
        if eid not in present and doc.complete:
            records.append(ctx.removed(te, same_run=not state.restarted))
            del events[eid]
            tombstones[eid] = at_ms

    if len(tombstones) > len(state.tombstones):
        tombstones = _prune(tombstones, at_ms)
    new_state = TrackerState(
        MappingProxyType(events), doc, at_ms, False, MappingProxyType(tombstones), key
    )
    return Observed(new_state, records, tuple(ignored), tuple(unrecorded), _doc_changed=True)


def _first_seen(ctx: _Ctx, view: EventView, records: list[LifecycleRecord]) -> TrackedEvent:
    te = TrackedEvent(view, ctx.at_ms, None, view.not_before_ms, (ctx.incarnation,))
    records.append(ctx.record(Phase.FIRST_SEEN, te, view))
    if view.status == EventStatus.STARTED:
        # Seen at once Started: unannounced, unless the agent was not looking (its first poll,
        # a restart, a long gap), when a Scheduled may have come and gone unseen.
        watching = ctx.gap_ms is not None and ctx.gap_ms <= CANCEL_WINDOW_MS
        by = _unannounced(view) if watching else None
        te = replace(te, started_ms=ctx.at_ms, approved_by=by)
        records.append(ctx.record(Phase.STARTED, te, view))
    return te


def _unannounced(view: EventView) -> str:
    """Who started an event first seen ``Started``: Azure's own policy for a user's reboot or
    redeploy (``automaticallyApprove``: no Scheduled), else nobody gave notice (a failure)."""
    user = view.source == "User" and view.event_type in ("Reboot", "Redeploy")
    return ApprovedBy.AZURE_POLICY if user else ApprovedBy.NO_NOTICE


def _started_by(te: TrackedEvent, ctx: _Ctx) -> str | None:
    """Who let an event seen Scheduled start: this VM, someone else before NotBefore, or
    nobody (it started at NotBefore); None when the poll before may have been before NotBefore
    and long ago (a restart, a gap): when it started is not known well enough."""
    nb = te.last_not_before_ms
    if te.approved:
        return ApprovedBy.THIS_VM
    if nb is None:
        return None
    at = ctx.at_ms + ctx.azure_offset_ms  # on Azure's clock, NotBefore's
    if at < nb:
        return ApprovedBy.ELSEWHERE
    since = at - (ctx.gap_ms if ctx.gap_ms is not None else at)
    if since >= nb or (ctx.gap_ms is not None and ctx.gap_ms <= CANCEL_WINDOW_MS):
        return ApprovedBy.AT_NOT_BEFORE
    return None


def _seen_again(
    ctx: _Ctx, te: TrackedEvent, view: EventView, records: list[LifecycleRecord]
) -> tuple[TrackedEvent, bool]:
    """The event as served again; True when it changed under an incarnation already considered
    (an Updated there would reuse that incarnation's RecordId: the change is taken in, later
    records carry it, and the agent says so)."""
    inc = ctx.incarnation
    considered = inc in te.incarnations  # each (EventId, incarnation) pair is considered once
    last_nb = view.not_before_ms if view.not_before_ms is not None else te.last_not_before_ms
    nxt = replace(
        te,
        view=view,
        last_not_before_ms=last_nb,
        incarnations=te.incarnations
        if considered
        else ((*te.incarnations, inc))[-MAX_INCARNATIONS:],
    )
    changed = view.status != te.view.status or view.content_key() != te.view.content_key()
    if view.status == EventStatus.STARTED and te.started_ms is None:
        # Never hidden, not even under a reused incarnation (the counter went backwards): losing
        # Started would misstate the Outcome.
        nxt = replace(nxt, started_ms=ctx.at_ms, approved_by=_started_by(te, ctx))
        records.append(ctx.record(Phase.STARTED, nxt, view))
    elif changed and not considered:
        records.append(ctx.record(Phase.UPDATED, nxt, view))
    started_now = view.status == EventStatus.STARTED and te.started_ms is None
    return nxt, changed and considered and not started_now


def approved(
    state: TrackerState,
    at_ms: int,
    event_ids: list[str],
    vm: VmIdentity,
    incarnation: int | None = None,
) -> Observed:
    """This agent's approval POST for ``event_ids`` was answered 200 at ``at_ms``."""
    events = dict(state.events)
    records = []
    inc = incarnation if incarnation is not None else (state.last_incarnation or 0)
    key = _kept(state, vm)
    ctx = _Ctx(at_ms, inc, vm, 0, key)
    for eid in event_ids:
        te = events.get(eid)
        if te is None or te.approved:
            continue
        te = replace(te, approved=True)
        events[eid] = te
        records.append(ctx.record(Phase.APPROVED, te, te.view))
    if not records:
        return Observed(state, [])
    return Observed(
        replace(state, events=MappingProxyType(events), vm_key=key),
        records,
        _doc_changed=True,
    )


def acted(state: TrackerState, event_id: str, text: str) -> TrackerState:
    """What the policy did for an open event, kept with it: its later records carry it."""
    te = state.events.get(event_id)
    if te is None or te.acted == text:
        return state
    events = {**state.events, event_id: replace(te, acted=text)}
    return replace(state, events=MappingProxyType(events))


def view_record(
    state: TrackerState, event_id: str, phase: Phase, at_ms: int, vm: VmIdentity
) -> LifecycleRecord:
    """The ``phase`` record of an open event as it stands now, without changing the state (the
    agent's actions resume open events from it after a restart)."""
    te = state.events[event_id]
    return _Ctx(at_ms, state.last_incarnation or 0, vm, None, _kept(state, vm)).record(
        phase, te, te.view
    )


def emitted(state: TrackerState, vm: VmIdentity) -> list[LifecycleRecord]:
    """The FirstSeen and Started records the open events of ``state`` were given, with their
    RecordIds and times, carrying each event as last seen: what a damaged outbox may have lost
    and can be sent again (duplicates are dropped downstream by RecordId). Updated and Approved
    records cannot be rebuilt (their content or time is not kept)."""
    out = []
    key = _kept(state, vm)
    for te in state.events.values():
        first = te.incarnations[0] if te.incarnations else state.last_incarnation or 0
        out.append(
            _Ctx(te.first_seen_ms, first, vm, None, key).record(Phase.FIRST_SEEN, te, te.view)
        )
        if te.started_ms is not None:
            last = te.incarnations[-1] if te.incarnations else first
            out.append(_Ctx(te.started_ms, last, vm, None, key).record(Phase.STARTED, te, te.view))
    return out


def latest_ms(state: TrackerState) -> int | None:
    """The latest time ``state`` remembers this agent observing anything (None: nothing yet)."""
    times = [
        t
        for te in state.events.values()
        for t in (te.first_seen_ms, te.started_ms)
        if t is not None
    ]
    times += list(state.tombstones.values())
    if state.last_ok_ms is not None:
        times.append(state.last_ok_ms)
    return max(times) if times else None


def shifted(state: TrackerState, delta_ms: int) -> TrackerState:
    """``state`` with every time this agent observed moved by ``delta_ms``: the wall clock was
    stepped, and what was seen before the step is re-expressed on the clock after it, so each
    delta (TimeGenerated minus a time of the same record) stays the real time elapsed. Times
    Azure gave (NotBefore) are Azure's and do not move."""

    def move(t: int | None) -> int | None:
        return None if t is None else t + delta_ms

    events = {
        eid: replace(te, first_seen_ms=te.first_seen_ms + delta_ms, started_ms=move(te.started_ms))
        for eid, te in state.events.items()
    }
    return replace(
        state,
        events=MappingProxyType(events),
        last_ok_ms=move(state.last_ok_ms),
        tombstones=MappingProxyType({k: v + delta_ms for k, v in state.tombstones.items()}),
    )


def _prune(tombstones: dict[str, int], at_ms: int) -> dict[str, int]:
    kept = {k: v for k, v in tombstones.items() if at_ms - v <= TOMBSTONE_MS}
    if len(kept) > MAX_TOMBSTONES:
        kept = dict(sorted(kept.items(), key=lambda kv: kv[1])[-MAX_TOMBSTONES:])
    return kept


@dataclass(frozen=True, slots=True)
class _Ctx:
    at_ms: int
    incarnation: int
    vm: VmIdentity
    gap_ms: int | None
    key: str  # the VM in RecordIds
    azure_offset_ms: int = 0  # added to the VM's time to compare it with NotBefore

    def record(
        self, phase: Phase, te: TrackedEvent, view: EventView, *, outcome: Outcome | None = None
    ) -> LifecycleRecord:
        at = self.at_ms
        notice = start_delay = since_started = None
        if phase in (Phase.FIRST_SEEN, Phase.UPDATED) and view.not_before_ms is not None:
            notice = seconds_between(view.not_before_ms, at + self.azure_offset_ms)
        if phase == Phase.STARTED and te.last_not_before_ms is not None:
            start_delay = seconds_between(at + self.azure_offset_ms, te.last_not_before_ms)
        if phase == Phase.REMOVED and te.started_ms is not None:
            since_started = seconds_between(at, te.started_ms)
        if phase == Phase.APPROVED:
            uncertainty: float | None = 0.0  # the POST's answer times it exactly
        else:
            uncertainty = None if self.gap_ms is None else self.gap_ms / 1000.0
        vm = self.vm
        return LifecycleRecord(
            TimeGenerated=format_ms(at),
            RecordId=record_id(self.key, view.event_id, phase, self.incarnation),
            Phase=phase,
            Outcome=outcome,
            EventId=view.event_id,
            EventType=view.event_type,
            EventStatus=view.status,
            EventSource=view.source,
            ResourceType=view.resource_type,
            Resources=list(view.resources),
            Description=view.description,
            DurationInSeconds=view.duration,
            NotBefore=format_ms(view.not_before_ms),
            DocumentIncarnation=self.incarnation,
            FirstSeenAt=format_ms(te.first_seen_ms),
            StartedAt=format_ms(te.started_ms),
            NoticeSeconds=notice,
            SinceFirstSeenSeconds=seconds_between(at, te.first_seen_ms),
            StartDelaySeconds=start_delay,
            SinceStartedSeconds=since_started,
            UncertaintySeconds=uncertainty,
            AffectsThisVm=vm.affects(view.resources),
            vm=vm,
            ApprovedBy=ApprovedBy.THIS_VM
            if phase == Phase.APPROVED
            else te.approved_by
            if phase in (Phase.STARTED, Phase.REMOVED)
            else None,
            Acted=te.acted,
        )

    def removed(self, te: TrackedEvent, *, same_run: bool) -> LifecycleRecord:
        if te.started_ms is not None:
            outcome = Outcome.COMPLETED
        elif same_run and self.gap_ms is not None and self.gap_ms <= CANCEL_WINDOW_MS:
            outcome = Outcome.CANCELLED
        else:
            outcome = Outcome.UNKNOWN  # it may have run unseen: across a restart or a long gap
        return self.record(Phase.REMOVED, te, te.view, outcome=outcome)
