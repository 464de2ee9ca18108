"""Azure's own record of the demo fleet, as Resource Graph shows it at each moment: one
``maintenanceresources`` row per event and VM it names (under that VM, naming it), with the
event's current status
(``Scheduled``, ``Started``, then ``Completed`` or ``Canceled`` once it is gone), and the
``healthresources`` annotations published so far, and the VMs that still exist (``resources``
for standalone VMs, ``computeresources`` for uniform scale-set instances: what the agent-health
workbook lists agentless VMs from). Agent or not, every VM's events are here: ``se-forwarder
collect --resource-graph`` reads them from the stand-in as from Azure.

The rows are computed when a query asks (``LiveTables.get``), from the same timelines the VMs'
IMDS simulators play, so the platform and the VMs never disagree about what happened when.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from email.utils import formatdate
from typing import Any

from se_forwarder.timefmt import format_ms

from ..simulator.scenario import Timeline
from .fleet import Fleet, FleetVm

SCHEDULED_TYPE = "microsoft.maintenance/scheduledevents"
ANNOTATION_TYPE = "microsoft.resourcehealth/resourceannotations"
VM_TYPE = "microsoft.compute/virtualmachines"
INSTANCE_TYPE = "microsoft.compute/virtualmachinescalesets/virtualmachines"
_ANNOTATIONS = uuid.UUID("2a9e7c41-0b3d-4f6e-8c15-9d7a3b2e1f04")


def platform_status(tl: Timeline, t: float, approved_at: float | None) -> str | None:
    """The event's status in Azure's record at scenario time ``t`` (None: not announced yet)."""
    if t < tl.spec.appear:
        return None
    state = tl.state_at(t, approved_at)
    if state is not None:
        return state.status
    start = tl.start_time(approved_at)
    return "Completed" if start < tl.remove_time(start) else "Canceled"


class LiveTables(dict[str, Any]):
    """The Resource Graph stand-in's ``tables``, computed at each query for scenario time
    ``now()``; ``approvals()``: EventId → scenario time of its approval (by any VM's agent)."""

    def __init__(
        self,
        fleet: Fleet,
        now: Callable[[], float],
        wall_ms: Callable[[float], int],
        approvals: Callable[[], Mapping[str, float]],
    ) -> None:
        super().__init__()
        self.fleet, self.now, self.wall_ms, self.approvals = fleet, now, wall_ms, approvals
        self.timelines = fleet.timelines()

    def get(self, table: str, default: Any = None) -> list[dict[str, Any]]:
        t = self.now()
        if table == "maintenanceresources":
            return self.scheduled_events(t)
        if table == "healthresources":
            return self.annotations(t)
        if table in ("resources", "computeresources"):
            return [
                r
                for r in self.vms_at(t)
                if (r["type"] == INSTANCE_TYPE) == (table == "computeresources")
            ]
        return []

    def vms_at(self, t: float) -> list[dict[str, Any]]:
        """The VMs that exist at ``t`` (not yet evicted or deleted), as Resource Graph lists them:
        a standalone VM in ``resources``, a uniform scale-set instance in ``computeresources``."""
        rows = []
        for vm in self.fleet.vms:
            if any(o.kind == "gone" and o.at <= t for o in vm.outages):
                continue
            common = {
                "id": vm.resource_id,
                "location": vm.location,
                "resourceGroup": vm.resource_group.lower(),
                "subscriptionId": vm.subscription_id,
                "tags": dict(vm.tags),
            }
            if vm.scale_set:
                rows.append(
                    common
                    | {
                        "name": vm.name,
                        "type": INSTANCE_TYPE,
                        "properties": {"vmId": vm.vm_id, "osProfile": {"computerName": vm.name}},
                    }
                )
            else:
                rows.append(
                    common
                    | {
                        "name": vm.name,
                        "type": VM_TYPE,
                        "properties": {
                            "vmId": vm.vm_id,
                            "extended": {
                                "instanceView": {"powerState": {"code": "PowerState/running"}}
                            },
                        },
                    }
                )
        return rows

    def scheduled_events(self, t: float) -> list[dict[str, Any]]:
        approvals = self.approvals()
        by_name = {vm.name: vm for vm in self.fleet.vms}
        rows = []
        for tl in self.timelines:
            status = platform_status(tl, t, approvals.get(tl.event_id))
            if status is None:
                continue
            state = tl.state_at(t, approvals.get(tl.event_id)) if status == "Scheduled" else None
            for name in tl.resources:
                vm = by_name.get(name)
                if vm is None:
                    continue
                rows.append(self._row(vm, tl, status, state.not_before if state else None))
        return rows

    def _row(
        self, vm: FleetVm, tl: Timeline, status: str, not_before: float | None
    ) -> dict[str, Any]:
        spec = tl.spec
        props = {
            "EventId": tl.event_id,
            "EventStatus": status,
            "EventType": spec.type,
            "ResourceType": spec.resource_type,
            "Resources": [vm.name],
            "NotBefore": (
                formatdate(self.wall_ms(not_before) / 1000, usegmt=True)
                if status == "Scheduled" and not_before is not None
                else ""
            ),
            "Description": spec.description,
            "EventSource": spec.source,
            "DurationInSeconds": spec.duration,
        }
        return {
            "id": f"{vm.resource_id}/providers/Microsoft.Maintenance/scheduledevents/{tl.event_id}",
            "name": tl.event_id,
            "type": SCHEDULED_TYPE,
            "location": vm.location,
            "resourceGroup": vm.resource_group.lower(),
            "subscriptionId": vm.subscription_id,
            "properties": props,
        }

    def annotations(self, t: float) -> list[dict[str, Any]]:
        rows = []
        for vm in self.fleet.vms:
            for i, a in enumerate(vm.annotations):
                if a.at > t:
                    continue
                aid = str(uuid.uuid5(_ANNOTATIONS, f"{self.fleet.name}/{vm.name}/{i}"))
                rows.append(
                    {
                        "id": f"{vm.resource_id}/providers/Microsoft.ResourceHealth/"
                        f"resourceAnnotations/{aid}",
                        "name": aid,
                        "type": ANNOTATION_TYPE,
                        "location": vm.location,
                        "resourceGroup": vm.resource_group.lower(),
                        "subscriptionId": vm.subscription_id,
                        "properties": {
                            "targetResourceId": vm.resource_id,
                            "targetResourceType": "Microsoft.Compute/virtualMachines",
                            "occurredTime": format_ms(self.wall_ms(a.at)),
                            "annotationName": a.name,
                            "context": a.context,
                            "category": a.category,
                            "impactType": a.impact,
                            "reason": a.name,
                            "summary": f"{a.name} on {vm.name}",
                        },
                    }
                )
        return rows
