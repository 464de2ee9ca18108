"""What the collector may approve, decided on its own view (pure: no clock, no I/O).

The view is built from what the collector already reads: every status row of every event (both
channels, duplicates included: the state is idempotent) and Resource Graph's inventory (each VM's
tags, group, scale set). An event is approved only when all of this holds, else it waits or is
left to Azure (``NotBefore``):

- it is ``Scheduled``, its ``NotBefore`` is still ahead, and the first matching rule says so;
- every VM it names is in the inventory, matches the rule, and runs no agent (the agents'
  heartbeats, ``agents.py``; unknown: nothing is approved);
- it is within the rule's ``ahead_seconds`` of ``NotBefore``;
- no service it touches would have more than ``max_in_impact`` VMs in impact: VMs whose event is
  ``Started`` and not ended (agents' VMs too), or approved by the collector and not yet started,
  each for at most ``impact_bound_seconds``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from ..model import EventStatus
from ..policy.match import Facts, matches_event
from ..timefmt import parse_iso_ms
from .ack_config import AckRule, PreviewAcknowledge
from .arm import targets, vm_key
from .record import SCHEDULED_EVENT, InventoryVm, PlatformRecord

ENDED = frozenset({"Completed", "Canceled"})


@dataclass(frozen=True, slots=True)
class Vm:
    """A VM as the inventory lists it, keyed as the fleet view keys it."""

    key: str
    subscription: str
    resource_group: str
    scale_set: str | None
    tags: Mapping[str, str]

    def service(self, tag: str) -> str:
        """The fleet view's service (``fleet-vms.kql``): the tag's value, else the scale set,
        else the resource group, lower case."""
        if self.tags.get(tag):
            return self.tags[tag].lower()
        if self.scale_set:
            return f"scale set: {self.subscription}/{self.resource_group}/{self.scale_set}"
        return f"resource group: {self.subscription}/{self.resource_group}"


def inventory_vms(vms: Iterable[InventoryVm]) -> dict[str, Vm]:
    out = {}
    for vm in vms:
        t = targets(vm.resource_id, [vm.name])[0]
        key = vm_key(t.subscription, t.resource_group, vm.name)
        out[key] = Vm(
            key, t.subscription, t.resource_group, vm.scale_set or t.scale_set, vm.tags or {}
        )
    return out


@dataclass
class Event:
    event_id: str
    resource: str  # what the acknowledge names: the VM's or the scale set's ARM id
    event_type: str
    source: str | None
    duration: int | None
    status: str
    not_before_ms: int | None
    # the VMs it names: fleet key -> (resource id, name, scale set)
    vms: dict[str, tuple[str, str, str | None]] = field(default_factory=dict)
    started_ms: int | None = None

    def facts(self) -> Facts:
        return Facts(
            self.event_id,
            self.event_type,
            self.source,
            self.status,
            self.duration,
            (),
            None,
            None,
            None,
        )


def _resource(row: PlatformRecord) -> str:
    if row.ScaleSetName:
        return (
            f"/subscriptions/{row.SubscriptionId}/resourcegroups/{row.ResourceGroup}"
            f"/providers/microsoft.compute/virtualmachinescalesets/{row.ScaleSetName}"
        )
    return row.VmResourceId


@dataclass(frozen=True, slots=True)
class Ruling:
    act: str  # "approve", "wait" (ask again next round), "never" (for this event), "none"
    why: str
    rule: int | None = None  # 1-based
    reason: str = ""  # "agent": an agent's VM; "limit": its service's count


NONE = Ruling("none", "no rule matches")


class View:
    """The events the collector has seen, and who is in impact."""

    def __init__(self, cfg: PreviewAcknowledge) -> None:
        self.cfg = cfg
        self.events: dict[str, Event] = {}
        self.vms: dict[str, Vm] = {}
        self.approved: dict[str, int] = {}  # EventId -> when the collector's approval was accepted

    def observe(self, rows: Iterable[PlatformRecord], now_ms: int) -> None:
        for row in rows:
            if row.RecordType != SCHEDULED_EVENT or not row.EventId or not row.EventStatus:
                continue
            ev = self.events.get(row.EventId)
            if ev is None:
                ev = self.events[row.EventId] = Event(
                    row.EventId,
                    _resource(row),
                    row.EventType or "",
                    row.EventSource,
                    row.DurationInSeconds,
                    row.EventStatus,
                    None,
                )
            key = vm_key(row.SubscriptionId, row.ResourceGroup, row.VmName)
            ev.vms[key] = (row.VmResourceId, row.VmName or "", row.ScaleSetName)
            if ev.status in ENDED or (
                ev.status == EventStatus.STARTED and row.EventStatus == EventStatus.SCHEDULED
            ):
                continue  # statuses only move forward (a pass may read an older copy)
            ev.status = row.EventStatus
            if row.EventStatus == EventStatus.SCHEDULED and row.NotBefore:
                ev.not_before_ms = parse_iso_ms(row.NotBefore)
            if row.EventStatus == EventStatus.STARTED and ev.started_ms is None:
                ev.started_ms = now_ms

    def in_impact(self, now_ms: int) -> set[str]:
        """The VMs in impact now, in the collector's view."""
        bound = int(self.cfg.impact_bound_seconds * 1000)
        out: set[str] = set()
        for ev in self.events.values():
            if ev.status in ENDED:
                continue
            since = (
                ev.started_ms
                if ev.status == EventStatus.STARTED
                else self.approved.get(ev.event_id)
            )
            if since is not None and now_ms - since < bound:
                out |= ev.vms.keys()
        return out

    def forget(self, now_ms: int) -> list[str]:
        """Events with nothing more to decide or count, forgotten (their ids returned): ended,
        or past NotBefore (or started) by more than ``impact_bound_seconds``."""
        bound = int(self.cfg.impact_bound_seconds * 1000)
        gone = [
            k
            for k, ev in self.events.items()
            if ev.status in ENDED or now_ms - (ev.started_ms or ev.not_before_ms or now_ms) > bound
        ]
        for k in gone:
            self.events.pop(k, None)
            self.approved.pop(k, None)
        return gone

    def decide(self, ev: Event, watched: frozenset[str] | None, now_ms: int) -> Ruling:
        if ev.status != EventStatus.SCHEDULED or ev.not_before_ms is None:
            return NONE
        if ev.not_before_ms <= now_ms:
            return Ruling("never", "NotBefore has passed: Azure starts it")
        for number, rule in enumerate(self.cfg.rules, 1):
            if matches_event(rule, ev.facts()):
                return self._by_rule(rule, number, ev, watched, now_ms)
        return NONE

    def _by_rule(
        self, rule: AckRule, number: int, ev: Event, watched: frozenset[str] | None, now_ms: int
    ) -> Ruling:
        vms = [self.vms.get(k) for k in sorted(ev.vms)]
        known = [vm for vm in vms if vm is not None]
        if len(known) < len(vms):
            return Ruling("wait", "a VM it names is not in Resource Graph's inventory", number)
        if not all(self._selects(rule, vm) for vm in known):
            return NONE
        if watched is None:
            return Ruling("wait", "which VMs run an agent is unknown now", number)
        agents = sorted(vm.key for vm in known if vm.key in watched)
        if agents:
            return Ruling(
                "never", f"an agent runs on {agents[0]}: the agent approves", number, "agent"
            )
        nb, ahead = ev.not_before_ms, rule.ahead_seconds
        if ahead is not None and nb is not None and nb - now_ms > ahead * 1000:
            return Ruling("wait", f"more than {ahead:g}s before NotBefore", number)
        return self._within_limit(ev, known, number, now_ms)

    def _within_limit(self, ev: Event, vms: list[Vm], number: int, now_ms: int) -> Ruling:
        tag, limit = self.cfg.service_tag, self.cfg.max_in_impact
        busy = self.in_impact(now_ms) - ev.vms.keys()
        services = sorted({vm.service(tag) for vm in vms})
        for service in services:
            mine = sum(1 for vm in vms if vm.service(tag) == service)
            theirs = sum(1 for k in busy if k in self.vms and self.vms[k].service(tag) == service)
            if mine + theirs > limit:
                why = f"service {service}: {theirs} in impact, {mine} more would pass {limit}"
                return Ruling("wait", why, number, "limit")
        return Ruling("approve", f"within {limit} in impact per service", number)

    def _selects(self, rule: AckRule, vm: Vm) -> bool:
        def among(value: str, allowed: list[str]) -> bool:
            return not allowed or value.lower() in {a.lower() for a in allowed}

        return (
            among(vm.subscription, rule.subscriptions)
            and among(vm.resource_group, rule.resource_groups)
            and among(vm.service(self.cfg.service_tag), rule.services)
            and all(vm.tags.get(k) == v for k, v in rule.tags.items())
        )
