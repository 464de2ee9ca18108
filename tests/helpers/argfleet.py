"""Azure Resource Graph rows (``maintenanceresources``) made by hand from a generated fleet's
truth, as ``az graph query -o json`` prints them: what Azure's own record would say at the end of
the data, plus events on VMs that run no agent (the coverage gaps no record can show).

The platform status comes from the plan, not from the agents' rows: Completed when the event
started and left the documents, Started when it started and is still there, Canceled when it
left without starting, Scheduled otherwise.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

from se_forwarder_testbed.fleet import Fleet
from se_forwarder_testbed.fleet.model import EventPlan
from se_forwarder_testbed.simulator.wire import rfc1123

SCHEDULED_EVENTS = "microsoft.maintenance/scheduledevents"
NO_AGENT_RG = "rg-no-agent"


def status(e: EventPlan, end: int) -> str:
    started = e.start is not None and e.start <= end
    gone = e.remove is not None and e.remove <= end
    if started:
        return "Completed" if gone else "Started"
    return "Canceled" if gone else "Scheduled"


def row(sub: str, rg: str, parent: str, event_id: str, props: dict[str, Any]) -> dict[str, Any]:
    rid = (
        f"/subscriptions/{sub}/resourcegroups/{rg}/providers/Microsoft.Compute/{parent}"
        f"/providers/Microsoft.Maintenance/scheduledevents/{event_id}"
    )
    return {
        "id": rid,
        "name": event_id,
        "type": SCHEDULED_EVENTS,
        "tenantId": str(uuid.UUID(int=7)),
        "kind": "",
        "location": "westeurope",
        "resourceGroup": rg,
        "subscriptionId": sub,
        "managedBy": "",
        "sku": None,
        "plan": None,
        "properties": props,
        "tags": None,
        "identity": None,
        "zones": None,
        "extendedLocation": None,
    }


def platform_rows(fleet: Fleet, lonely_vms: int = 3) -> list[dict[str, Any]]:
    """One row per event of the fleet (its parent: the scale set of its VMs, or its first VM),
    plus one Reboot on each of ``lonely_vms`` VMs that run no agent."""
    vms = fleet.truth.vms
    out = []
    for e in fleet.truth.events.values():
        first = vms[e.resources[0]]
        rg = first.resource_id.split("/resourceGroups/")[1].split("/")[0]
        sub = first.resource_id.split("/")[2]
        parent = (
            f"virtualMachineScaleSets/{e.resources[0].rsplit('_', 1)[0]}"
            if "_" in e.resources[0]
            else f"virtualMachines/{e.resources[0]}"
        )
        st = status(e, fleet.truth.end)
        props = {
            "EventId": e.event_id,
            "EventType": e.event_type,
            "ResourceType": "VirtualMachine",
            "Resources": list(_final_resources(e)),
            "EventStatus": st,
            "NotBefore": ""
            if e.not_before is None or st != "Scheduled"
            else rfc1123(e.not_before // 1000),
            "Description": e.description,
            "EventSource": e.source,
            "DurationInSeconds": e.duration,
            "ScheduledEventApiVersion": "2020-07-01",
        }
        out.append(row(sub, rg, parent, e.event_id, props))
    sub = next(iter(vms.values())).resource_id.split("/")[2]
    for k in range(lonely_vms):
        eid = str(uuid.UUID(int=0xA0 + k, version=4)).upper()
        name = f"no-agent-vm-{k}"
        props = {
            "EventId": eid,
            "EventType": "Reboot",
            "ResourceType": "VirtualMachine",
            "Resources": [name],
            "EventStatus": "Completed",
            "NotBefore": "",
            "Description": "Host server maintenance.",
            "EventSource": "Platform",
            "DurationInSeconds": -1,
            "ScheduledEventApiVersion": "2020-07-01",
        }
        out.append(row(sub, NO_AGENT_RG, f"virtualMachines/{name}", eid, props))
    return out


def _final_resources(e: EventPlan) -> tuple[str, ...]:
    resources = e.resources
    for u in e.updates:
        resources = u.resources if u.resources is not None else resources
    return resources


def write(path: Path, rows: list[dict[str, Any]], bare: bool = False) -> Path:
    doc: Any = (
        rows
        if bare
        else {"count": len(rows), "data": rows, "skip_token": None, "total_records": len(rows)}
    )
    path.write_text(json.dumps(doc, indent=1), "utf-8")
    return path
