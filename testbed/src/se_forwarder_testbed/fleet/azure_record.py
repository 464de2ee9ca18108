"""Azure's own record of a generated fleet (``ScheduledEventsPlatform_CL``, as the collector writes
it): one row per status change per event and VM (Scheduled, re-Scheduled, Started, Completed or
Canceled), a Resource Health annotation for each start (what the platform says happened), and a
few VMs per cell that run no agent, with events of their own. ``FleetSpec(platform=True)``.

The truth (``PlatformFact`` per event and VM) is decided here, from the plan, before any row is
made: the platform's final status, the annotation and whether it matches what was announced. A
planned Reboot is done as a live migration on one event in four, a planned Freeze fails on one in
seven and on the agentless VM (chosen from the EventId, so a query cannot guess it from anything
but the annotation).
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Iterator
from typing import Any

from se_forwarder.collector import record as rec
from se_forwarder.collector.arm import targets
from se_forwarder.model import EventView

from .agent import iso
from .documents import view_at
from .model import HOUR, MINUTE, SECOND, EventPlan, PlatformFact
from .plan import SUBSCRIPTION, Cell

_NS = uuid.UUID("5f0d7a52-93c4-4d7e-b1f0-6a2f0c9e8d31")

#: (annotation, context, category, impact type, verdict) by what was announced
_HOST_CRASH = (
    "VirtualMachineHostCrashed",
    "Platform Initiated",
    "Unplanned",
    "Downtime Reboot",
    "as announced",
)
_FREEZE_OK = (
    "LiveMigrationSucceeded",
    "Platform Initiated",
    "Planned",
    "Downtime Freeze",
    "as announced",
)
_FREEZE_FAILED = (
    "VirtualMachinePlannedFreezeFailed",
    "Platform Initiated",
    "Planned",
    "Downtime Freeze",
    "failed",
)
_REBOOT = (
    "VirtualMachineRebootInitiatedForPlannedMaintenance",
    "Platform Initiated",
    "Planned",
    "Downtime Reboot",
    "as announced",
)
_REBOOT_AS_MIGRATION = (
    "LiveMigrationSucceeded",
    "Platform Initiated",
    "Planned",
    "Downtime Freeze",
    "other than announced",
)
_USER_REBOOT = (
    "VirtualMachineRebootInitiatedByControlPlane",
    "Customer Initiated",
    "Not Applicable",
    "Downtime Reboot",
    "as announced",
)
_REDEPLOY = (
    "VirtualMachineMigrationInitiatedForPlannedMaintenance",
    "Platform Initiated",
    "Planned",
    "Downtime Reboot",
    "as announced",
)
_PREEMPT = (
    "VirtualMachinePreempted",
    "Platform Initiated",
    "Not Applicable",
    "Informational",
    "as announced",
)


def agentless(cell: Cell) -> list[EventPlan]:
    """Events on the cell's VMs that run no agent (``solo-{c}-{k}`` in ``rg-solo-{c}``): a Reboot
    done, a Freeze done, a Redeploy still scheduled at the end (an impactful event no agent
    watches) and a Reboot cancelled."""
    c, end, rng = cell.i, cell.end, random.Random(cell.i * 7919 + 21)
    plans = [
        (0, "Reboot", end - 30 * HOUR, 15 * MINUTE, 30 * SECOND, 5 * MINUTE, "agentless-done"),
        (1, "Freeze", end - 10 * HOUR, 15 * MINUTE, 20 * SECOND, 1 * MINUTE, "agentless-done"),
        (2, "Redeploy", end - 20 * HOUR, 2 * 24 * HOUR, None, None, "agentless-scheduled"),
        (1, "Reboot", end - 40 * HOUR, 24 * HOUR, None, 3 * HOUR, "agentless-cancelled"),
    ]
    out = []
    for k, etype, appear, notice, after, last, kind in plans:
        if appear < cell.start + HOUR:
            continue
        nb = appear + notice
        start = None if after is None else nb + after
        remove = None if last is None else (start if start is not None else appear) + last
        eid = str(uuid.UUID(int=rng.getrandbits(128), version=4)).upper()
        out.append(
            EventPlan(eid, etype, (), (f"solo-{c}-{k}",), appear, nb, start, remove, kind=kind)
        )
    return out


def plan(cell: Cell, end: int) -> tuple[list[EventPlan], list[PlatformFact]]:
    """The cell's events as Azure publishes them (the agents' and the agentless VMs') and the
    truth per event and VM."""
    events = cell.events + agentless(cell)
    with_agent = {vp.vm.VmName for vp in cell.vms.values() if vp.vm.VmName is not None}
    return events, facts(cell, events, end, with_agent)


def solo_group(cell: Cell) -> str:
    return f"rg-solo-{cell.i}"


def _annotation(e: EventPlan, etype: str) -> tuple[str, str, str, str, str] | None:
    pick = int(e.event_id.replace("-", ""), 16)
    if e.not_before is None:
        return _HOST_CRASH
    if etype == "Freeze":
        return _FREEZE_FAILED if pick % 7 == 0 or e.kind == "agentless-done" else _FREEZE_OK
    if etype == "Reboot":
        return (
            _USER_REBOOT
            if e.source == "User"
            else _REBOOT_AS_MIGRATION
            if pick % 4 == 0
            else _REBOOT
        )
    if etype == "Redeploy":
        return _REDEPLOY
    if etype == "Preempt":
        return _PREEMPT
    return None  # a Terminate: the VM is deleted, no health annotation


def _end(e: EventPlan, end: int) -> tuple[int | None, str | None]:
    """When and how the platform says the event ended (None: not by ``end``)."""
    start = e.start if e.start is not None and e.start <= end else None
    if e.remove is not None and e.remove <= end:
        return e.remove, ("Completed" if start is not None and start <= e.remove else "Canceled")
    if start is not None and e.event_type in ("Terminate", "Preempt") and start + 5 * MINUTE <= end:
        return start + 5 * MINUTE, "Completed"  # the VM is gone; nothing left to remove it from
    return None, None


def facts(
    cell: Cell, events: list[EventPlan], end: int, with_agent: set[str]
) -> list[PlatformFact]:
    """The platform's truth for each event and VM it names (its final ``Resources``)."""
    out = []
    for e in events:
        if e.appear > end:
            continue
        last = _announced(e, end)
        etype = last.event_type if last is not None else e.event_type
        duration = last.duration if last is not None and last.duration is not None else e.duration
        nb = (
            last.not_before_ms
            if last is not None and last.not_before_ms is not None
            else e.not_before
        )
        ended_at, status = _end(e, end)
        started = e.start is not None and e.start <= end
        status = status or ("Started" if started else "Scheduled")
        ann = _annotation(e, etype) if started else None
        names = last.resources if last is not None else e.resources
        for name in names:
            rg = _group(cell, name)
            out.append(
                PlatformFact(
                    e.event_id,
                    f"{SUBSCRIPTION}/{rg}/{name}".lower(),
                    name,
                    rg,
                    etype,
                    duration,
                    status,
                    e.appear,
                    nb,
                    e.start if started else None,
                    ended_at,
                    ann[0] if ann else None,
                    ann[3] if ann else None,
                    ann[4] if ann else "no annotation",
                    name in with_agent,
                    e.kind,
                )
            )
    return out


def _announced(e: EventPlan, end: int) -> EventView | None:
    """The event as served last before it started or went away (its announced type)."""
    until = min(t for t in (e.start, e.remove, end + 1) if t is not None)
    return view_at(e, max(e.appear, until - 1))


def _group(cell: Cell, name: str) -> str:
    for vp in cell.vms.values():
        if vp.vm.VmName == name:
            return vp.vm.ResourceGroup or ""
    return solo_group(cell)


def rows(
    cell: Cell, events: list[EventPlan], fs: list[PlatformFact], end: int, seed: int
) -> Iterator[dict[str, Any]]:
    """The collector's rows for the facts, each with its ingestion time (1 to 4 minutes after
    Azure's time; one in 20 delivered twice by Event Grid, minutes apart)."""
    rng = random.Random(seed)
    by_id = {e.event_id: e for e in events}
    for f in fs:
        e = by_id[f.event_id]
        for t, row in _status_rows(e, f, end) + _annotation_rows(e, f, rng):
            at = t + rng.randint(60, 240) * SECOND
            if at > end:
                continue
            yield {**row, "_IngestionTime": iso(at)}
            if rng.random() < 0.05 and at + 10 * MINUTE <= end:
                yield {**row, "_IngestionTime": iso(at + rng.randint(2, 10) * MINUTE)}


def _base(f: PlatformFact, record_type: str, t: int, grid: str) -> dict[str, Any]:
    scale_set = f.vm_name.rsplit("_", 1)[0] if "_" in f.vm_name else None
    parent = (
        f"/subscriptions/{SUBSCRIPTION}/resourceGroups/{f.resource_group}/providers/Microsoft.Compute/"
        + (f"virtualMachineScaleSets/{scale_set}" if scale_set else f"virtualMachines/{f.vm_name}")
    )
    target = targets(parent, [f.vm_name])[0]
    return {
        "TimeGenerated": iso(t),
        "RecordType": record_type,
        "Channel": rec.EVENT_GRID,
        "VmResourceId": target.resource_id,
        "VmName": target.name,
        "SubscriptionId": target.subscription,
        "ResourceGroup": target.resource_group,
        "ScaleSetName": target.scale_set,
        "GridEventId": str(uuid.uuid5(_NS, grid)),
        "CollectedAt": iso(t + 30 * SECOND),
    }


def _status_rows(e: EventPlan, f: PlatformFact, end: int) -> list[tuple[int, dict[str, Any]]]:
    """Scheduled at its announcement and at each re-schedule, Started, then Completed or
    Canceled: each with the event as served at that moment."""
    steps = (
        []
        if e.not_before is None
        else [
            (t, "Scheduled") for t in sorted({e.appear, *(u.at for u in e.updates if u.at <= end)})
        ]
    )
    if f.started_at is not None:
        steps.append((f.started_at, "Started"))
    if f.ended_at is not None:
        steps.append((f.ended_at, f.status))
    out = []
    for t, status in steps:
        view = view_at(e, t) if status in ("Scheduled", "Started") else None
        nb = view.not_before_ms if status == "Scheduled" and view is not None else None
        base = _base(f, rec.SCHEDULED_EVENT, t, f"{f.event_id}|{f.vm_name}|{t}")
        row = rec.PlatformRecord(
            RecordId=rec.platform_record_id(
                base["VmResourceId"], e.event_id, status, iso(nb) if nb else None
            ),
            EventId=e.event_id,
            EventType=view.event_type if view is not None else f.event_type,
            EventStatus=status,
            EventSource=e.source,
            ResourceType="VirtualMachine",
            Resources=list(view.resources if view is not None else (f.vm_name,)),
            Description=e.description,
            DurationInSeconds=view.duration if view is not None else f.duration,
            NotBefore=iso(nb) if nb else None,
            **base,
        )
        out.append((t, row.as_dict()))
    return out


def _annotation_rows(
    e: EventPlan, f: PlatformFact, rng: random.Random
) -> list[tuple[int, dict[str, Any]]]:
    if f.started_at is None:
        return []
    ann = _annotation(e, f.event_type)
    if ann is None:
        return []
    t = f.started_at + rng.randint(30, 300) * SECOND
    aid = str(uuid.uuid5(_NS, f"{f.event_id}|{f.vm_name}|annotation"))
    base = _base(f, rec.ANNOTATION, t, aid)
    row = rec.PlatformRecord(
        RecordId=rec.annotation_record_id(base["VmResourceId"], aid),
        AnnotationId=aid,
        AnnotationName=ann[0],
        AnnotationContext=ann[1],
        AnnotationCategory=ann[2],
        ImpactType=ann[3],
        AnnotationReason=ann[0],
        AnnotationSummary=f"{ann[0]} on {f.vm_name}",
        **base,
    )
    return [(t, row.as_dict())]
