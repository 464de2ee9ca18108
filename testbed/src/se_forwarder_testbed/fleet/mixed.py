"""A mixed, churning fleet (issue 28): what a partial rollout looks like to the fleet view. Agents
on about two VMs in three; Azure's own record (``ScheduledEventsPlatform_CL``) of every event on
every VM, agent or not, with Event Grid's duplicates and a row hours late; Resource Graph's
inventory (one ``Inventory`` row per VM and one ``InventoryPass`` row per subscription each hour,
as ``se-forwarder collect`` writes them); and the truth they were made from (``MixedTruth``).

    fleet = generate_mixed(MixedSpec(cells=1))

Each cell (times from the data's end E, which is 06:00 on the 1st of a month, so the data spans a
month edge):

* same names in other places: a scale set ``web`` in the prod and the staging groups, a group
  ``rg-batch-<c>`` in two subscriptions holding VMs of the same names (``Batch-0``: Azure keeps a
  name's case); none tagged, so their services are the qualified fallbacks;
* a tagged scale set ``pool`` of 10 instances, six scaled in at E-30 h with no Terminate (four of
  them ran agents: silent to the agents' tables alone, deleted to the inventory), then two of the
  four left rebooting at once at E+2 h (2 of 4: half the service);
* ``pay``: two agents and ``pay-2`` with none, a Reboot for ``pay-1`` and ``pay-2`` at E+3 h;
* ``api-0``/``api-1`` re-tagged from ``shop`` to ``api`` at E-42 h; a Reboot before it; a Reboot
  and a Redeploy overlapping on ``api-0`` (10:01-10:11 and 10:05-10:15 on the last day of the
  month); a Redeploy on ``api-1`` from 23:55 to 00:15 across the month edge, done as a live
  migration, with a ``Degraded`` annotation (a prediction) nearer to its start;
* Spot evictions (Preempt) of an agentless and a watched instance; a standalone VM deleted with
  no event; an agentless VM's Redeploy announced 70 hours ahead.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from se_forwarder.collector import record as rec
from se_forwarder.model import VmIdentity
from se_forwarder.report.kql.shims import INGESTION_COLUMN
from se_forwarder.timefmt import to_ms

from . import documents
from .agent import VmAgent, iso
from .model import DAY, HOUR, MINUTE, SECOND, EventPlan, Run, VmPlan

SUB_A = "6d0c1a9e-3f1b-4b6a-9c37-2a5e8f0d4b11"
SUB_B = "0f4e2b7c-8a1d-4c3e-9b5f-7d6a1e2c3b40"
INVENTORY_EVERY = HOUR
_NS = uuid.UUID("c1d0a9b7-2e4f-4a8b-9c6d-1f3e5a7b9c0d")
_POWER = "PowerState/running"

#: annotation (name, context, category, impact type) by what a started event was done as
DONE = {
    "Reboot": ("VirtualMachineRebootInitiatedForPlannedMaintenance", "Downtime Reboot"),
    "Redeploy": ("VirtualMachineMigrationInitiatedForPlannedMaintenance", "Downtime Reboot"),
    "Freeze": ("LiveMigrationSucceeded", "Downtime Freeze"),
    "Preempt": ("VirtualMachinePreempted", "Informational"),
    "live-migration": ("LiveMigrationSucceeded", "Downtime Freeze"),
}
DEGRADED = "VirtualMachinePossiblyDegradedDueToHardwareFailure"


@dataclass(frozen=True, slots=True)
class MixedSpec:
    cells: int = 1
    seed: int = 28
    end: datetime = datetime(2026, 6, 1, 6, 0, tzinfo=UTC)
    days: int = 3
    heartbeat_seconds: int = 300


@dataclass(slots=True)
class MixedVm:
    """One VM as it is in Azure: its identity, its tags over time, its agent (or none), when it
    existed and how it went."""

    name: str  # as Azure names it (case kept)
    subscription: str
    resource_group: str
    scale_set: str | None
    agent: bool
    tags: list[tuple[int, dict[str, str]]]  # (from, tags), in time order
    created: int
    gone_at: int | None = None
    gone_how: str | None = None  # "scaled in", "deleted", "evicted"
    zone: str | None = None
    fault_domain: int = 0

    @property
    def key(self) -> str:
        return f"{self.subscription}/{self.resource_group}/{self.name}".lower()

    @property
    def resource_id(self) -> str:
        base = (
            f"/subscriptions/{self.subscription}/resourceGroups/{self.resource_group}"
            "/providers/Microsoft.Compute"
        )
        if self.scale_set:
            instance = self.name.rsplit("_", 1)[1]
            return f"{base}/virtualMachineScaleSets/{self.scale_set}/virtualMachines/{instance}"
        return f"{base}/virtualMachines/{self.name}"

    @property
    def vm_id(self) -> str:
        return str(uuid.uuid5(uuid.NAMESPACE_URL, self.resource_id.lower()))

    def exists(self, t: int) -> bool:
        return self.created <= t and (self.gone_at is None or t < self.gone_at)

    def tags_at(self, t: int) -> dict[str, str]:
        out: dict[str, str] = {}
        for at, tags in self.tags:
            if at <= t:
                out = tags
        return out


@dataclass(slots=True)
class MixedEvent:
    """One event on the VMs it names (plan keys), as Azure runs it."""

    event_id: str
    event_type: str
    vms: tuple[str, ...]  # MixedVm.key of each VM it names
    appear: int
    not_before: int | None
    start: int | None
    end: int | None  # Completed (or Canceled when it never started)
    duration: int = -1
    done_as: str | None = None  # what the annotation says happened (DONE key); None: its type
    degraded: bool = False  # a Degraded annotation (a prediction) a minute before its start
    kind: str = ""


@dataclass(slots=True)
class MixedTruth:
    start: int
    end: int
    vms: dict[str, MixedVm]  # by key
    events: dict[str, MixedEvent]
    #: (key, (from, to)) of each interval a VM's agent ran
    agent_runs: dict[str, list[tuple[int, int | None]]] = field(default_factory=dict)


@dataclass(slots=True)
class MixedFleet:
    records: list[dict[str, Any]]
    heartbeats: list[dict[str, Any]]
    platform: list[dict[str, Any]]
    truth: MixedTruth


class _Cell:
    def __init__(self, c: int, start: int, end: int, rng: random.Random) -> None:
        self.c, self.start, self.end, self.rng = c, start, end, rng
        self.vms: dict[str, MixedVm] = {}
        self.events: list[MixedEvent] = []

    def vm(
        self,
        name: str,
        sub: str,
        rg: str,
        scale_set: str | None = None,
        agent: bool = True,
        tags: dict[str, str] | None = None,
        **kw: Any,
    ) -> MixedVm:
        v = MixedVm(name, sub, rg, scale_set, agent, [(0, tags or {})], self.start, **kw)
        self.vms[v.key] = v
        return v

    def event(
        self,
        vms: list[MixedVm],
        etype: str,
        appear: int,
        notice: int,
        after: int | None,
        last: int | None,
        kind: str,
        **kw: Any,
    ) -> MixedEvent:
        """NotBefore ``notice`` after ``appear``; started ``after`` NotBefore (None: not by the
        end); Completed ``last`` after the start."""
        nb = appear + notice
        start = None if after is None else nb + after
        end = None if start is None or last is None else start + last
        eid = str(uuid.UUID(int=self.rng.getrandbits(128), version=4)).upper()
        e = MixedEvent(
            eid, etype, tuple(v.key for v in vms), appear, nb, start, end, kind=kind, **kw
        )
        self.events.append(e)
        return e


def _month_day(end: int, day_from_end: int, hh: int, mm: int) -> int:
    """``hh:mm`` on the day ``day_from_end`` days before the end's day (0: the end's day)."""
    midnight = end - end % DAY
    return midnight - day_from_end * DAY + hh * HOUR + mm * MINUTE


def _script(cell: _Cell) -> None:
    c, E = cell.c, cell.end
    # same names in other places; nothing tagged: the services are the qualified fallbacks
    prod = [
        cell.vm(f"web_{k}", SUB_A, f"rg-prod-{c}", "web", agent=k < 2, zone=str(1 + k % 3))
        for k in range(4)
    ]
    staging = [
        cell.vm(f"web_{k}", SUB_A, f"rg-staging-{c}", "web", agent=k < 2, zone=str(1 + k % 3))
        for k in range(3)
    ]
    batch_a = [cell.vm(f"Batch-{k}", SUB_A, f"rg-batch-{c}", agent=k == 0) for k in range(2)]
    batch_b = [cell.vm(f"Batch-{k}", SUB_B, f"RG-Batch-{c}", agent=k == 0) for k in range(2)]
    # a tagged pool of 10, 6 scaled in without notice
    pool = [
        cell.vm(
            f"pool_{k}",
            SUB_B,
            f"rg-pool-{c}",
            "pool",
            agent=k in (0, 1, 4, 5, 6, 7),
            tags={"service": f"pool-{c}"},
            fault_domain=k % 2,
        )
        for k in range(10)
    ]
    for v in pool[4:]:
        v.gone_at, v.gone_how = E - 30 * HOUR, "scaled in"
    pay = [
        cell.vm(f"pay-{k}", SUB_A, f"rg-pay-{c}", agent=k < 2, tags={"service": f"pay-{c}"})
        for k in range(3)
    ]
    retag = _month_day(E, 2, 12, 0)  # noon, two days before the end's day
    api = [
        cell.vm(f"api-{k}", SUB_A, f"rg-api-{c}", tags={"service": f"shop-{c}"}) for k in range(2)
    ]
    for v in api:
        v.tags.append((retag, {"service": f"api-{c}"}))
    spot = [cell.vm(f"spot_{k}", SUB_A, f"rg-spot-{c}", "spot", agent=k == 1) for k in range(2)]
    old = cell.vm("old-0", SUB_A, f"rg-old-{c}")
    old.gone_at, old.gone_how = E - 20 * HOUR, "deleted"

    # upcoming, impactful: what the risk and the upcoming views must count
    cell.event(pool[0:1], "Reboot", E - 3 * HOUR, 5 * HOUR, None, None, "pool-risk")
    cell.event(
        pool[1:2], "Reboot", E - 3 * HOUR + MINUTE, 5 * HOUR + 2 * MINUTE, None, None, "pool-risk"
    )
    cell.event(pay[1:3], "Reboot", E - 2 * HOUR, 5 * HOUR, None, None, "agentless-upcoming")
    cell.event(
        [prod[0], prod[2]],
        "Reboot",
        E - 90 * MINUTE,
        6 * HOUR + 30 * MINUTE,
        None,
        None,
        "same-name",
    )
    cell.event(
        [staging[0]], "Reboot", E - 80 * MINUTE, 6 * HOUR + 20 * MINUTE, None, None, "same-name"
    )
    cell.event([batch_a[0]], "Redeploy", E - 70 * MINUTE, 7 * HOUR, None, None, "same-name")
    cell.event([batch_b[0]], "Redeploy", E - 60 * MINUTE, 7 * HOUR, None, None, "same-name")
    cell.event([batch_b[1]], "Redeploy", E - 70 * HOUR, 72 * HOUR, None, None, "announced-early")
    # what happened: the account
    t = _month_day(E, 3, 18, 0)
    cell.event(
        [api[0]], "Reboot", t - 15 * MINUTE, 15 * MINUTE, 15 * MINUTE, 10 * MINUTE, "before-retag"
    )
    t = _month_day(E, 1, 10, 1)
    cell.event([api[0]], "Reboot", t - 20 * MINUTE, 20 * MINUTE, 0, 10 * MINUTE, "overlap")
    t = _month_day(E, 1, 10, 5)
    cell.event([api[0]], "Redeploy", t - 20 * MINUTE, 20 * MINUTE, 0, 10 * MINUTE, "overlap")
    t = _month_day(E, 1, 23, 55)
    cell.event(
        [api[1]],
        "Redeploy",
        t - 30 * MINUTE,
        30 * MINUTE,
        0,
        20 * MINUTE,
        "month-edge",
        done_as="live-migration",
        degraded=True,
    )
    t = _month_day(E, 2, 8, 0)
    cell.event([prod[3]], "Reboot", t - 15 * MINUTE, 15 * MINUTE, 0, 10 * MINUTE, "agentless-done")
    # evictions: Azure's Preempt, then the instance is gone
    for k, at in ((0, E - 10 * HOUR), (1, E - 12 * HOUR)):
        cell.event([spot[k]], "Preempt", at, 30 * SECOND, 0, 5 * MINUTE, "evicted", duration=0)
        spot[k].gone_at, spot[k].gone_how = at + 30 * SECOND + 2 * MINUTE, "evicted"
    # a Reboot done on a VM with an agent and one without: the agent's Started record and Azure's
    # rows arrive minutes apart (last, so the events above keep their EventIds)
    t = _month_day(E, 1, 14, 0)
    cell.event(pay[1:3], "Reboot", t - 15 * MINUTE, 15 * MINUTE, 0, 10 * MINUTE, "mixed-done")


def plan_mixed(spec: MixedSpec) -> tuple[list[_Cell], MixedTruth]:
    end = to_ms(spec.end)
    start = end - spec.days * DAY
    rng = random.Random(spec.seed)
    cells = []
    for c in range(spec.cells):
        cell = _Cell(c, start, end, random.Random(rng.getrandbits(64)))
        _script(cell)
        cells.append(cell)
    truth = MixedTruth(
        start,
        end,
        {k: v for cell in cells for k, v in cell.vms.items()},
        {e.event_id: e for cell in cells for e in cell.events},
    )
    return cells, truth


def generate_mixed(spec: MixedSpec = MixedSpec()) -> MixedFleet:
    truth, made = stream_mixed(spec)
    rows: dict[str, list[dict[str, Any]]] = {"records": [], "heartbeats": [], "platform": []}
    for kind, row in made:
        rows[kind].append(row)
    return MixedFleet(rows["records"], rows["heartbeats"], rows["platform"], truth)


def stream_mixed(
    spec: MixedSpec = MixedSpec(), part: tuple[int, int] = (0, 1)
) -> tuple[MixedTruth, Iterator[tuple[str, dict[str, Any]]]]:
    """The truth, and the rows one at a time as ("records" | "heartbeats" | "platform", row), in
    the order ``generate_mixed`` lists them: for a fleet whose rows do not fit in memory (10,000
    VMs: ~4.9 million heartbeats), written to files as they come (bench/fleet_model.py).
    ``part`` (k, n): only the rows of cells k, k + n, k + 2n... (each cell's rows depend on the
    cell alone), so n processes make the fleet's rows between them; the truth is the whole
    fleet's (its ``agent_runs``: of the cells this part made)."""
    cells, truth = plan_mixed(spec)
    first, step = part

    def rows() -> Iterator[tuple[str, dict[str, Any]]]:
        for cell in cells[first::step]:
            for k, v in enumerate(cell.vms.values()):
                if v.agent:
                    for kind, row in _agent_rows(cell, v, truth, spec, k):
                        yield ("records" if kind == "record" else "heartbeats"), row
            for row in _platform_rows(cell, truth.end, spec.seed * 31 + cell.c):
                yield "platform", row
            for row in _inventory_rows(cell, truth.end):
                yield "platform", row

    return truth, rows()


# -- the agents ------------------------------------------------------------------------------


def _identity(v: MixedVm, tags: dict[str, str]) -> VmIdentity:
    return VmIdentity(
        Computer=v.name.replace("_", "-").lower(),
        VmName=v.name,
        VmId=v.vm_id,
        VmResourceId=v.resource_id,
        SubscriptionId=v.subscription,
        ResourceGroup=v.resource_group,
        Location="westeurope",
        Zone=v.zone,
        ScaleSetName=v.scale_set,
        FaultDomain=v.fault_domain,
        UpdateDomain=0,
        Tags=dict(tags) or None,
    )


def _plan_event(e: MixedEvent, names: tuple[str, ...], end: int) -> EventPlan:
    return EventPlan(
        e.event_id,
        e.event_type,
        names,
        names,
        e.appear,
        e.not_before,
        e.start,
        e.end if e.end is not None and e.end <= end else None,
        duration=e.duration,
        kind=e.kind,
    )


def _agent_rows(
    cell: _Cell, v: MixedVm, truth: MixedTruth, spec: MixedSpec, k: int
) -> Iterator[tuple[str, dict[str, Any]]]:
    """The VM's agent from the start (or its creation) to its end: one agent run per tag
    period (the agent reads its tags when it starts; a re-tag is read at the restart that
    follows it), dead with the VM when it goes."""
    group = v.key.rsplit("/", 1)[0]
    seen = [
        _plan_event(
            e,  # the names, as served, of the VMs of its group the event names
            tuple(cell.vms[key].name for key in e.vms if key.rsplit("/", 1)[0] == group),
            truth.end,
        )
        for e in cell.events
        if v.key in e.vms
    ]
    docs = documents.timeline(seen)
    stop = v.gone_at
    periods = [at for at, _ in v.tags] + [stop if stop is not None else None]
    runs: list[tuple[int, int | None]] = []
    for i, (at, tags) in enumerate(v.tags):
        begin = max(at, v.created) + (5 * SECOND if i else 0)
        until = periods[i + 1]
        if until is not None and until <= begin:
            continue
        plan = VmPlan(_identity(v, tags), [Run(begin, until, clean=i + 1 < len(v.tags))])
        plan.lag = (30 * SECOND, 3 * MINUTE)
        agent = VmAgent(
            plan,
            seen,
            docs,
            truth.end,
            spec.heartbeat_seconds * 1000,
            seed=spec.seed * 1_000_003 + cell.c * 1009 + k * 17 + i,
        )
        runs.append((begin, until))
        yield from agent.rows()
    truth.agent_runs[v.key] = runs


# -- Azure's record --------------------------------------------------------------------------


def _target(v: MixedVm) -> dict[str, Any]:
    return {
        "VmResourceId": v.resource_id.lower()
        if not v.scale_set
        else (
            f"/subscriptions/{v.subscription}/resourcegroups/{v.resource_group}/providers/"
            f"microsoft.compute/virtualmachines/{v.name}"
        ).lower(),
        "VmName": v.name,
        "SubscriptionId": v.subscription.lower(),
        "ResourceGroup": v.resource_group.lower(),
        "ScaleSetName": v.scale_set.lower() if v.scale_set else None,
    }


def _platform_rows(cell: _Cell, end: int, seed: int) -> Iterator[dict[str, Any]]:
    """Scheduled, Started, Completed (Event Grid, one in 8 delivered twice, one Completed 3 hours
    late) and the annotations of each started event."""
    rng = random.Random(seed)
    late_done = next(e for e in cell.events if e.kind == "before-retag").event_id
    for e in cell.events:
        for key in e.vms:
            v = cell.vms[key]
            steps: list[tuple[int, str]] = [(e.appear, "Scheduled")]
            if e.start is not None:
                steps.append((e.start, "Started"))
            if e.end is not None:
                steps.append((e.end, "Completed"))
            for t, status in steps:
                nb = iso(e.not_before) if status == "Scheduled" and e.not_before else None
                target = _target(v)
                row = rec.PlatformRecord(
                    TimeGenerated=iso(t),
                    RecordId=rec.platform_record_id(target["VmResourceId"], e.event_id, status, nb),
                    RecordType=rec.SCHEDULED_EVENT,
                    Channel=rec.EVENT_GRID,
                    EventId=e.event_id,
                    EventType=e.event_type,
                    EventStatus=status,
                    EventSource="Platform",
                    ResourceType="VirtualMachine",
                    Resources=[cell.vms[k].name for k in e.vms],
                    Description="Host server maintenance.",
                    DurationInSeconds=e.duration,
                    NotBefore=nb,
                    GridEventId=str(uuid.uuid5(_NS, f"{e.event_id}|{key}|{status}")),
                    CollectedAt=iso(t + 20 * SECOND),
                    **target,
                ).as_dict()
                lag = (3 * HOUR) if (e.event_id == late_done and status == "Completed") else 0
                yield from _arrive(row, t + lag + rng.randint(60, 240) * SECOND, end, rng)
                if status == "Scheduled":  # the collector's Resource Graph pass, once a day
                    until = min(x for x in (e.start, e.end, end) if x is not None)
                    day = t - t % DAY + DAY + 7 * MINUTE
                    while day < until:
                        again = rec.restated(rec.PlatformRecord(**row), day).as_dict()
                        yield from _arrive(again, day + 2 * MINUTE, end, rng)
                        day += DAY
            if e.start is not None and e.start <= end:
                yield from _annotations(e, v, end, rng)


def _annotations(
    e: MixedEvent, v: MixedVm, end: int, rng: random.Random
) -> Iterator[dict[str, Any]]:
    assert e.start is not None  # only started events have annotations
    name, impact = DONE[e.done_as or e.event_type]
    notes: list[tuple[int, str, str, tuple[int, int] | None]] = [
        (e.start + 3 * MINUTE, name, impact, None)
    ]
    if e.degraded:
        notes.append((e.start - MINUTE, DEGRADED, "Degraded", (e.start - MINUTE, e.start + HOUR)))
    for t, aname, itype, window in notes:
        aid = str(uuid.uuid5(_NS, f"{e.event_id}|{v.key}|{aname}"))
        target = _target(v)
        row = rec.PlatformRecord(
            TimeGenerated=iso(t),
            RecordId=rec.annotation_record_id(target["VmResourceId"], aid),
            RecordType=rec.ANNOTATION,
            Channel=rec.EVENT_GRID,
            AnnotationId=aid,
            AnnotationName=aname,
            AnnotationContext="Platform Initiated",
            AnnotationCategory="Unplanned" if itype == "Degraded" else "Planned",
            ImpactType=itype,
            ImpactStartTime=iso(window[0]) if window else None,
            ImpactEndTime=iso(window[1]) if window else None,
            AnnotationReason=aname,
            AnnotationSummary=f"{aname} on {v.name}",
            GridEventId=aid,
            CollectedAt=iso(t + 20 * SECOND),
            **target,
        ).as_dict()
        yield from _arrive(row, t + rng.randint(60, 240) * SECOND, end, rng)


def _arrive(row: dict[str, Any], at: int, end: int, rng: random.Random) -> Iterator[dict[str, Any]]:
    if at > end:
        return
    yield {**row, INGESTION_COLUMN: iso(at)}
    if rng.random() < 0.125:
        again = at + rng.randint(2, 30) * MINUTE
        if again <= end:
            yield {**row, INGESTION_COLUMN: iso(again)}


def _inventory_rows(cell: _Cell, end: int) -> Iterator[dict[str, Any]]:
    """Each hour, per subscription: one Inventory row per VM that exists (its tags then) and one
    InventoryPass row when the pass is complete (rec.inventory_rows, as the collector does)."""
    t = cell.start + 7 * MINUTE
    subs = sorted({v.subscription for v in cell.vms.values()})
    while t <= end:
        for sub in subs:
            listed = [
                rec.InventoryVm(
                    resource_id=v.resource_id,
                    name=v.name,
                    vm_id=v.vm_id,
                    power_state=_POWER,
                    zone=v.zone,
                    fault_domain=v.fault_domain,
                    tags=v.tags_at(t),
                )
                for v in cell.vms.values()
                if v.subscription == sub and v.exists(t)
            ]
            for row in rec.inventory_rows(sub, listed, t, f"{cell.c}"):
                arrive = t + 2 * MINUTE
                if arrive <= end:
                    yield {**row.as_dict(), INGESTION_COLUMN: iso(arrive)}
        t += INVENTORY_EVERY
