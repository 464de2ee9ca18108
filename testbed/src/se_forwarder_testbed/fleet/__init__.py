"""A simulated fleet for the fleet view's tests and benchmarks: deterministic (seeded) rows built
with the project's own tracker and heartbeat code, and the truth they were built from.

    fleet = generate(FleetSpec(vms=52, days=8))       # rows in memory + truth
    for table, row in stream(FleetSpec(vms=10_000, days=30)): ...   # rows one VM at a time

Rows are dicts in the contract's shape plus ``_IngestionTime`` (when Log Analytics received that
copy; at-least-once copies share the RecordId). ``se_forwarder.report.Engine`` loads them.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from se_forwarder.report.kql.shims import INGESTION_COLUMN
from se_forwarder.timefmt import to_ms

from . import azure_record, churn, documents
from .agent import VmAgent
from .model import DAY, EventPlan, Fleet, Truth, VmPlan, VmTruth
from .plan import Cell
from .scenario import script

__all__ = [
    "CELL",
    "INGESTION_COLUMN",
    "Fleet",
    "FleetSpec",
    "Truth",
    "cell_rows",
    "generate",
    "plan",
    "stream",
]

CELL = 52  # VMs per cell (plan.Cell)


@dataclass(frozen=True, slots=True)
class FleetSpec:
    vms: int = CELL  # rounded up to whole cells of 52
    days: int = 8
    seed: int = 9
    end: datetime = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)  # "now" when the data ends
    heartbeat_seconds: int = 300
    #: benchmarks at size: heartbeats older than ``fine_days`` before the end come every
    #: ``coarse_heartbeat_seconds`` instead (None: every heartbeat_seconds throughout, as tests
    #: need). The queries' short windows (15 min to 7 days) keep the real interval; a 10,000-VM,
    #: 30-day fleet then has about 26 million heartbeats instead of 87 million.
    fine_days: int | None = None
    coarse_heartbeat_seconds: int = 3600
    #: a churning fleet (``churn.py``): scale-in and scale-out, recreated VMs, deallocations,
    #: records hours late, 0.5 to 5 minutes of ingestion lag, upgrade waves, resource groups in
    #: two casings, a hardware failure as a Redeploy. False: the kind fleet of the first tests.
    churn: bool = False
    #: Azure's own record too (azure_record.py): rows of ``ScheduledEventsPlatform_CL`` (table
    #: "platform") for every event and VM, annotations, and VMs that run no agent
    platform: bool = False


def plan(spec: FleetSpec) -> tuple[list[Cell], Truth]:
    end = to_ms(spec.end)
    start = end - spec.days * DAY
    rng = random.Random(spec.seed)
    cells = []
    for i in range(-(-spec.vms // CELL)):
        shift = rng.randint(0, 3600) * 1000 if i else 0
        cell = Cell(i, start, end - shift, random.Random(rng.getrandbits(64)), churn=spec.churn)
        script(cell)
        if spec.churn:
            churn.script(cell)
        cell.end = end
        cells.append(cell)
    truth = Truth(start, end, {e.event_id: e for c in cells for e in c.events}, {})
    if spec.platform:
        for c in cells:
            c.platform = azure_record.plan(c, end)
            truth.platform.extend(c.platform[1])
    for c in cells:
        for name, vp in c.vms.items():
            truth.vms[name] = VmTruth(
                name,
                vp.vm.VmId or "",
                vp.vm.VmResourceId or "",
                vp.fate,
                vp.runs,
                gone_at=vp.gone_at,
                gone_how=vp.gone_how,
                vm_name=vp.vm.VmName or name,
                outages=vp.outages,
                tags=dict(vp.vm.Tags or {}),
                scale_set=vp.vm.ScaleSetName,
                resource_group=vp.vm.ResourceGroup or "",
                zone=vp.vm.Zone,
                fault_domain=vp.vm.FaultDomain,
            )
    return cells, truth


def stream(
    spec: FleetSpec, truth_out: list[Truth] | None = None
) -> Iterator[tuple[str, dict[str, Any]]]:
    """("records" | "heartbeats" | "platform", row) for the whole fleet, one VM after the other
    (platform rows only with ``spec.platform``)."""
    cells, truth = plan(spec)
    if truth_out is not None:
        truth_out.append(truth)
    for cell in cells:
        yield from cell_rows(cell, truth, spec)


def cell_rows(cell: Cell, truth: Truth, spec: FleetSpec) -> Iterator[tuple[str, dict[str, Any]]]:
    """The rows of one cell (a unit of work for parallel generation)."""
    for k, (name, vp) in enumerate(cell.vms.items()):
        yield from _vm_rows(cell, name, vp, truth, spec, k)
    if spec.platform:
        events, facts = cell.platform
        for row in azure_record.rows(cell, events, facts, truth.end, seed=spec.seed * 7 + cell.i):
            yield "platform", row


def _vm_rows(
    cell: Cell, name: str, vp: VmPlan, truth: Truth, spec: FleetSpec, k: int
) -> Iterator[tuple[str, dict[str, Any]]]:
    seen: list[EventPlan] = [e for e in cell.events if name in e.audience]
    coarse = (
        None
        if spec.fine_days is None
        else (truth.end - spec.fine_days * DAY, spec.coarse_heartbeat_seconds * 1000)
    )
    agent = VmAgent(
        vp,
        seen,
        documents.timeline(seen),
        truth.end,
        spec.heartbeat_seconds * 1000,
        seed=spec.seed * 1_000_003 + cell.i * 1009 + k,
        coarse=coarse,
    )
    for kind, row in agent.rows():
        yield ("records" if kind == "record" else "heartbeats"), row
    vt = truth.vms[name]
    vt.last_heartbeat, vt.last_reason = agent.last_beat or (None, None)


def generate(spec: FleetSpec = FleetSpec()) -> Fleet:
    """The whole fleet in memory (tests); ``stream`` for sizes that do not fit."""
    out: list[Truth] = []
    rows: dict[str, list[dict[str, Any]]] = {"records": [], "heartbeats": [], "platform": []}
    for table, row in stream(spec, out):
        rows[table].append(row)
    return Fleet(rows["records"], rows["heartbeats"], out[0], rows["platform"])
