"""Resource Graph rows → platform rows. Pure.

A ``maintenanceresources`` row of type ``microsoft.maintenance/scheduledevents`` carries the
event's ARM id and its fields in ``properties`` (as Event Grid's ``resourceInfo`` does); a
``healthresources`` row of type ``microsoft.resourcehealth/resourceannotations`` an annotation.
Resource Graph keeps only an event's current status: a pass sees the latest one, and the
collector's time of reading is the row's ``TimeGenerated`` (Azure gives none for the status).
The inventory (``inventory_of``) is what exists: VMs from ``resources``, Uniform scale-set
instances from ``computeresources``.
"""

from __future__ import annotations

from typing import Any

from .. import timefmt
from ..errors import UnreadableEvent
from .arm import targets
from .eventgrid import Parsed, annotation_rows, scheduled_rows
from .record import RESOURCE_GRAPH, InventoryVm

SCHEDULED_TYPE = "microsoft.maintenance/scheduledevents"
ANNOTATION_TYPE = "microsoft.resourcehealth/resourceannotations"


def rows_of(table: str, rows: list[dict[str, Any]], collected_ms: int) -> Parsed:
    out = Parsed()
    for row in rows:
        kind = str(row.get("type") or "").lower() if isinstance(row, dict) else ""
        try:
            if kind == SCHEDULED_TYPE:
                recs = scheduled_rows(
                    str(row.get("id") or ""),
                    row.get("properties"),
                    collected_ms,
                    collected_ms,
                    RESOURCE_GRAPH,
                    None,
                    out,
                )
            elif kind == ANNOTATION_TYPE:
                recs = annotation_rows(
                    row, _occurred(row, collected_ms), collected_ms, RESOURCE_GRAPH, None, out
                )
            else:
                out.ignored += 1
                continue
        except Exception as exc:  # one row must never take the page down
            out.problems.append(
                f"{table} row {str(row.get('id'))[:200]}: {' '.join(str(exc).split())[:200]}"
            )
            continue
        out.notifications.append((None, recs))
    return out


def _occurred(row: dict[str, Any], default_ms: int) -> int:
    found = row.get("properties")
    props = found if isinstance(found, dict) else {}
    when = props.get("occurredTime") or props.get("occurredtime")
    return timefmt.parse_iso_ms(str(when)) if when else default_ms


VM_TYPE = "microsoft.compute/virtualmachines"
UNIFORM_TYPE = "microsoft.compute/virtualmachinescalesets/virtualmachines"


def inventory_of(rows: list[dict[str, Any]]) -> tuple[dict[str, list[InventoryVm]], list[str]]:
    """``resources`` (VMs, Flexible instances) and ``computeresources`` (Uniform instances) rows
    → the VMs by subscription (lower case), and a problem per unreadable row."""
    out: dict[str, list[InventoryVm]] = {}
    problems: list[str] = []
    for row in rows:
        kind = str(row.get("type") or "").lower() if isinstance(row, dict) else ""
        if kind not in (VM_TYPE, UNIFORM_TYPE):
            continue
        try:
            vm = _inventory_vm(row, kind)
        except (ValueError, UnreadableEvent, TypeError) as exc:
            problems.append(f"inventory row {str(row.get('id'))[:200]}: {str(exc)[:200]}")
            continue
        out.setdefault(str(row.get("subscriptionId") or "").lower(), []).append(vm)
    return out, problems


def _inventory_vm(row: dict[str, Any], kind: str) -> InventoryVm:
    rid = str(row.get("id") or "")
    props = _obj(row.get("properties"))
    extended = _obj(props.get("extended"))
    view = _obj(extended.get("instanceView")) or _obj(props.get("instanceView"))
    power = _obj(view.get("powerState"))
    zones = row.get("zones") if isinstance(row.get("zones"), list) else []
    tags = row.get("tags") if isinstance(row.get("tags"), dict) else None
    fd = view.get("platformFaultDomain", props.get("platformFaultDomain"))
    name = str(row.get("name") or "")
    scale_set = None
    if kind == VM_TYPE:  # a Flexible instance names its scale set in its properties
        parent = props.get("virtualMachineScaleSet")
        if isinstance(parent, dict) and parent.get("id"):
            scale_set = str(parent["id"]).rstrip("/").rsplit("/", 1)[-1].lower()
    target = targets(rid, [name])[0]  # raises on an id that is no VM
    return InventoryVm(
        resource_id=rid,
        name=name or target.name,
        vm_id=str(props.get("vmId")) if props.get("vmId") else None,
        power_state=str(power.get("code")) if power.get("code") else None,
        zone=str(zones[0]) if zones else None,
        fault_domain=int(fd) if isinstance(fd, (int, str)) and str(fd).isdigit() else None,
        tags={str(k): str(v) for k, v in tags.items()} if tags else None,
        scale_set=scale_set,
    )


def _obj(value: Any) -> dict[str, Any]:
    """``value`` when it is a JSON object, else an empty one."""
    return value if isinstance(value, dict) else {}
