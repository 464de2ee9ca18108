"""What the fleet view must say about a churning fleet, from the generator's truth (the plan:
agent runs, deletions, events) and, where a rule is about arriving evidence, from when rows
reached the workspace (their ingestion times). Never from the queries.

``L`` is how long evidence takes to show: 5 minutes of ingestion lag and a heartbeat interval,
with a minute to spare. An item that changed less than that before a moment is "in flight" there
and only held to the view's own answer."""

from __future__ import annotations

from bisect import bisect_right
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import cached_property

from se_forwarder.timefmt import format_ms, to_ms
from se_forwarder_testbed.fleet import Fleet
from se_forwarder_testbed.fleet.model import EventPlan, VmTruth

from . import fleetview as fv

L = timedelta(minutes=11)
SETTLE = timedelta(minutes=75)  # a VM's last stop or start this long ago: its status is final
IMPACTFUL = fv.IMPACTFUL
GONE_WITH_EVIDENCE = ("terminate", "preempt", "replaced")


def dt(ms: int) -> datetime:
    return fv.ts(format_ms(ms))


def ms(t: datetime) -> int:
    from datetime import UTC

    return to_ms(t.replace(tzinfo=UTC))


@dataclass
class Truth:
    """The fleet's truth with the lookups the properties need."""

    fleet: Fleet

    def __post_init__(self) -> None:
        self.vms = self.fleet.truth.vms
        self.events = self.fleet.truth.events
        self.by_vm_id = {v.vm_id: k for k, v in self.vms.items()}
        self.by_name: dict[str, list[str]] = defaultdict(list)  # VmName -> plan keys
        for k, v in self.vms.items():
            self.by_name[v.vm_name or k].append(k)

    # -- VMs --------------------------------------------------------------------------------------

    def delivering(self, v: VmTruth, t0: int, t1: int) -> bool:
        """The agent ran throughout [t0, t1] and no delivery outage touched it."""
        runs = [r for r in v.runs if r.start <= t0 and (r.end is None or r.end > t1)]
        return bool(runs) and not any(o.start < t1 and o.end > t0 - 3600_000 for o in v.outages)

    def settled(self, key: str, t: datetime) -> bool:
        """No agent start or stop and no delivery outage in the last SETTLE before ``t``."""
        v, now = self.vms[key], ms(t)
        since = now - int(SETTLE.total_seconds() * 1000)
        edges = [r.start for r in v.runs] + [r.end for r in v.runs if r.end is not None]
        return not any(since <= e <= now for e in edges) and not any(
            o.start < now and o.end > since - 3 * 3600_000 for o in v.outages
        )

    @cached_property
    def beat_times(self) -> dict[str, list[int]]:
        """Per VmId, when each of its heartbeats was made (ms, in order), from the generator's
        rows."""
        out: dict[str, set[int]] = defaultdict(set)
        for b in self.fleet.heartbeats:
            out[b["VmId"]].add(ms(fv.at(b)))
        return {k: sorted(v) for k, v in out.items()}

    def status(self, key: str, t: datetime, horizon: timedelta) -> str | None:
        """What the agent-health view must say of a settled VM at ``t`` (None: out of view: not
        created yet, or its last heartbeat is within 30 minutes of the start of the view's
        ``horizon``; that heartbeat is the last one made before its agent stopped, which is up to
        an hour before the stop where old heartbeats are hourly, ``FleetSpec.fine_days``)."""
        v, now = self.vms[key], ms(t)
        if any(r.start <= now and (r.end is None or now < r.end) for r in v.runs):
            return "reporting"
        last = v.last_stop(now)
        if last is None:
            return None  # not created yet
        beats = self.beat_times.get(v.vm_id, [])
        made = bisect_right(beats, last.end)
        if not made or beats[made - 1] <= now - int(
            (horizon - timedelta(minutes=30)).total_seconds() * 1000
        ):
            return None
        if v.gone_how in GONE_WITH_EVIDENCE and v.gone_at is not None and v.gone_at <= now:
            return "gone"
        if self.removed_by_event(v, beats[made - 1], now):
            return "gone"  # for now: an evicted Spot VM that comes back later is gone until then
        return "silent"

    @cached_property
    def removals(self) -> dict[str, list[EventPlan]]:
        """Per VM name, the events that are ever a Terminate or Preempt for it."""
        out: dict[str, list[EventPlan]] = defaultdict(list)
        for e in self.events.values():
            if {e.event_type, *(u.event_type for u in e.updates)} & {"Terminate", "Preempt"}:
                for name in e.resources:
                    out[name].append(e)
        return out

    def removed_by_event(self, v: VmTruth, last_beat: int, now: int) -> bool:
        """Rule 6's gone by an event: a Terminate or Preempt for the VM started, or its NotBefore
        passed without a cancellation, by ``now`` and at most 30 minutes before its last
        heartbeat."""
        for e in self.removals.get(v.vm_name or v.name, []):
            if self.type_at(e, now) not in ("Terminate", "Preempt"):
                continue
            due = self.due(e, now)
            cancelled = (
                e.remove is not None and e.remove <= now and (e.start is None or e.start > now)
            )
            if due is not None and last_beat - 30 * 60_000 <= due <= now and not cancelled:
                return True
        return False

    # -- events -------------------------------------------------------------------------------

    def audience_delivering(self, e: EventPlan, t0: int, t1: int) -> list[str]:
        return [n for n in e.audience if self.delivering(self.vms[n], t0, t1)]

    def due(self, e: EventPlan, t: int) -> int | None:
        nb = e.not_before
        for u in e.updates:
            if u.at <= t and u.not_before is not None:
                nb = u.not_before
        return e.start if e.start is not None and e.start <= t else nb

    def type_at(self, e: EventPlan, t: int) -> str:
        out = e.event_type
        for u in e.updates:
            if u.at <= t and u.event_type:
                out = u.event_type
        return out

    def event_open(self, e: EventPlan, t: datetime) -> bool | None:
        """Whether the view must show ``e`` open at ``t`` (None: in flight, or no VM can tell)."""
        now, lag = ms(t), int(L.total_seconds() * 1000)
        moments = [e.appear, e.start, e.remove] + [u.at for u in e.updates]
        if any(m is not None and now - lag <= m <= now for m in moments):
            return None
        due = self.due(e, now)
        if (
            self.type_at(e, now) in ("Terminate", "Preempt")
            and due is not None
            and due < now - 15 * 60_000
        ):
            return False
        if e.appear > now:
            return False
        if e.remove is not None and e.remove < now - lag:
            # ended: closed once a VM that saw the end has said so
            return False if self.audience_delivering(e, e.remove, now - lag + 1) else None
        if self.audience_delivering(e, now - 20 * 60_000, now):
            return True
        return None

    def started(self, e: EventPlan, t: datetime) -> bool:
        return e.not_before is None or (e.start is not None and e.start <= ms(t))


# -- alerts ---------------------------------------------------------------------------------------


def upcoming_by_service(rows: list[dict]) -> dict[tuple, tuple]:
    """services-upcoming's rows keyed as the plans' answers are: (service, zone, fault domain) ->
    (events, VMs, earliest NotBefore in ms, expected impact in VM-minutes)."""
    return {
        (r["Service"], r["Zone"] or "", r["FaultDomain"]): (
            r["Events"],
            r["VMs"],
            ms(r["EarliestNotBefore"]),
            r["ExpectedImpactVmMinutes"],
        )
        for r in rows
    }


def raised(history: list[tuple[datetime, set]]) -> dict[tuple, list[datetime]]:
    """When each alert was raised (absent at the previous evaluation, present at this one)."""
    out: dict[tuple, list[datetime]] = defaultdict(list)
    before: set = set()
    for t, now in history:
        for k in now - before:
            out[k].append(t)
        before = now
    return out


def first_copies(rows: list[dict]) -> list[dict]:
    """One row per RecordId: the copy that reached the workspace first (a redelivered copy
    arrives later and is no news: the heartbeat was seen when its first copy arrived)."""
    out: dict[str, dict] = {}
    for r in rows:
        k = r["RecordId"]
        if k not in out or fv.ts(r["_IngestionTime"]) < fv.ts(out[k]["_IngestionTime"]):
            out[k] = r
    return list(out.values())


def first_ingested(rows: list[dict], pick) -> dict[tuple, datetime]:
    """Per key (``pick(row)``, None: skip), when its first copy reached the workspace."""
    out: dict[tuple, datetime] = {}
    for r in rows:
        k = pick(r)
        if k is None:
            continue
        ing = fv.ts(r["_IngestionTime"])
        if k not in out or ing < out[k]:
            out[k] = ing
    return out
