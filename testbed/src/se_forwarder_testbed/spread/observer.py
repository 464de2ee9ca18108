"""The observer: what happened, from the simulators (Azure's side: approvals, when each event
started and ended) and the records the agents delivered, never from the agents' claims in the
store; and whether the policy held.

``watch`` runs beside the chaos and checks the one invariant that can be seen at any instant
(before NotBefore, at most N VMs in impact, all in one zone); ``judge`` checks the rest once the
events are over, on the exact impact windows of the simulators' change logs: no approval while
the VM's agent could not reach the store (the store down, or its partition), every event over,
and each event's decision recorded once: an ``Approved`` record (early, through the service's
coordinator: its slot named) or a ``Started`` record that says it started at NotBefore.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from se_forwarder.model import ApprovedBy, EventStatus, Phase

from .chaos import Outages
from .stand import SERVICE, Shape, Stand, Vm

GRACE = 1.0  # real seconds from an admission to its approval's POST (the approver's thread)
BOOT = 5.0  # real seconds from an agent's start to its first poll, at most (a loaded machine)


@dataclass
class Window:
    vm: int
    zone: str
    start: float | None = None  # real epoch seconds the event was Started, None: never
    end: float | None = None  # ... and removed
    approved: float | None = None  # ... and first approved (Azure's side)
    not_before: float = 0.0  # real epoch seconds of its NotBefore

    @property
    def early(self) -> bool:
        """Started before NotBefore: approved early."""
        return self.start is not None and self.start < self.not_before - 0.001


@dataclass
class Judgement:
    windows: list[Window]
    most: int  # most VMs in impact at once before NotBefore
    zones: int  # most zones in impact at once before NotBefore
    problems: list[str] = field(default_factory=list)
    decisions: dict[int, str] = field(default_factory=dict)  # vm -> its decision record, words

    @property
    def ok(self) -> bool:
        return not self.problems


class Observer(threading.Thread):
    def __init__(self, stand: Stand, expect: Shape) -> None:
        super().__init__(name="observer", daemon=True)
        self.stand, self.expect = stand, expect
        self.not_before = stand.t0 + stand.shape.real(stand.shape.notice)
        self.seen: list[str] = []  # violations seen while it ran
        self.ticks = 0
        self._halt = threading.Event()

    def run(self) -> None:
        expect = self.expect
        while not self._halt.wait(0.02):
            self.ticks += 1
            now = time.time()
            zones = [vm.zone for vm in self.stand.vms if _started(vm)]
            early = expect.policy and now < self.not_before - 0.05
            if early and (
                len(zones) > expect.n or (expect.spread == "zone" and len(set(zones)) > 1)
            ):
                self.seen.append(f"{now - self.stand.t0:.2f}s: in impact {sorted(zones)}")

    def stop(self) -> None:
        self._halt.set()
        self.join(5)

    def over(self) -> bool:
        return all(not vm.sim.events() and _ever_started(vm) for vm in self.stand.vms)


def _started(vm: Vm) -> bool:
    return any(e["EventStatus"] == EventStatus.STARTED for e in vm.sim.events())


def _ever_started(vm: Vm) -> bool:
    return window(vm).start is not None


def window(vm: Vm) -> Window:
    """The impact window from the simulator's change log (exact: the script's own times)."""
    notice = vm.sim.scenario.events[0].not_before or 0.0  # scenario seconds from its start
    w = Window(vm.index, vm.zone, not_before=vm.sim.wall_time_of(notice) - vm.offset)
    for ch in vm.sim.changes:
        at = vm.sim.wall_time_of(ch.scenario_time) - vm.offset
        started = any(e["EventStatus"] == EventStatus.STARTED for e in ch.events)
        if started and w.start is None:
            w.start = at
        if w.start is not None and not ch.events and w.end is None:
            w.end = at
    approvals = vm.sim.approvals
    if approvals:
        w.approved = min(approvals.values()) - vm.offset
    return w


def judge(stand: Stand, outages: Outages, seen: list[str], expect: Shape) -> Judgement:
    """The run against the policy ``expect`` says (the stand's own, unless a test breaks it)."""
    windows = [window(vm) for vm in stand.vms]
    most, zones = _most(windows)
    v = Judgement(windows, most, zones, list(seen))
    if expect.policy and (most > expect.n or (expect.spread == "zone" and zones > 1)):
        v.problems.append(f"{most} in impact at once in {zones} zone(s) before NotBefore")
    for w in windows:
        if w.start is None or w.end is None:
            v.problems.append(
                f"vm {w.vm}: its event never {'started' if w.start is None else 'ended'}"
            )
        if w.approved is not None:
            decided = decided_at(w.vm, w.approved, outages)
            cut = outages.store + outages.partitions.get(w.vm, [])
            for down, up in cut:
                if down + GRACE < decided < up:
                    v.problems.append(
                        f"vm {w.vm}: approved at {w.approved - stand.t0:.2f}s (decided at "
                        f"{decided - stand.t0:.2f}s) while the store was out of its reach "
                        f"({down - stand.t0:.2f}s to {up - stand.t0:.2f}s)"
                    )
    for vm, w in zip(stand.vms, windows, strict=True):
        _records(vm, w, outages, stand, v)
    return v


def decided_at(vm: int, approved: float, outages: Outages) -> float:
    """When the approval Azure got at ``approved`` was decided: at the agent's admission when it
    was killed there and the approval came with its restart (the approval on its way, kept in
    ``state.db`` and sent again at the next start: ``actions/intents.py``), else when it came.
    On a loaded machine the restart can fall in a store outage that began after the admission."""
    at = outages.admitted.get(vm)
    if at is None or approved < at:
        return approved
    back = [up for down, up in outages.agents.get(vm, []) if down == at]
    if back and approved <= back[0] + BOOT + GRACE:
        return at
    return approved


def _most(windows: list[Window]) -> tuple[int, int]:
    """The most windows open at once when one starts early, and the most zones among them."""
    most = zones = 0
    for w in windows:
        if not w.early or w.start is None:
            continue
        t = w.start
        open_ = [o for o in windows if o.start is not None and o.start <= t and (o.end or 1e20) > t]
        most = max(most, len(open_))
        zones = max(zones, len({o.zone for o in open_}))
    return most, zones


def records(vm: Vm) -> list[dict[str, Any]]:
    """What the agent delivered (the file sink), each RecordId once (delivery is at least once)."""
    path, rows = vm.sink(), dict[str, dict[str, Any]]()
    if path.exists():
        for line in path.read_text().splitlines():
            try:
                r = json.loads(line)
            except ValueError:
                continue
            rows.setdefault(r.get("RecordId"), r)
    return [r for r in rows.values() if r.get("Phase")]


def _records(vm: Vm, w: Window, outages: Outages, stand: Stand, v: Judgement) -> None:
    rows = records(vm)
    by: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        by.setdefault(r["Phase"], []).append(r)
    expect = {Phase.FIRST_SEEN: 1, Phase.STARTED: 1, Phase.REMOVED: 1}
    expect[Phase.APPROVED] = int(w.approved is not None)
    for phase, count in expect.items():
        got = len(by.get(phase, []))
        if got != count:
            v.problems.append(f"vm {vm.index}: {got} {phase} record(s), {count} expected")
    # the agent not watching when its event started: dead, or started again and not yet polling
    dead_at_start = any(
        d <= (w.start or 0) <= u + BOOT for d, u in outages.agents.get(vm.index, [])
    )
    started = by.get(Phase.STARTED, [{}])[0]
    who = started.get("ApprovedBy")
    if w.approved is not None:
        approved = by.get(Phase.APPROVED, [{}])[0]
        acted = str(approved.get("Acted") or "")
        v.decisions[vm.index] = f"approved early: {acted}"
        if f"(service tag:{SERVICE}: " not in acted and stand.shape.policy:
            v.problems.append(
                f"vm {vm.index}: its Approved record does not name the service's coordinator "
                f"({acted!r})"
            )
        want = {ApprovedBy.THIS_VM, None} if dead_at_start else {ApprovedBy.THIS_VM}
    else:
        v.decisions[vm.index] = f"left to NotBefore: ApprovedBy {who}; {started.get('Acted')}"
        want = {ApprovedBy.AT_NOT_BEFORE, None} if dead_at_start else {ApprovedBy.AT_NOT_BEFORE}
    if by.get(Phase.STARTED) and who not in want:
        v.problems.append(f"vm {vm.index}: its Started record says ApprovedBy {who}")
