"""A row of ``ScheduledEventsPlatform_CL``: one status of one Scheduled Event on one VM, or one
Resource Health annotation on one VM, as Azure reported it (docs/record-contract.md §6)."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, fields, replace
from typing import Any, ClassVar

from .. import __version__, contract
from ..outbox import OutboxRow
from ..timefmt import format_ms
from .arm import targets

_NAMESPACE = uuid.UUID("0b7c36f2-5a61-4a8e-9d43-7e2f18c4b9d1")
SCHEDULED_EVENT, ANNOTATION = "ScheduledEvent", "Annotation"
#: Resource Graph's inventory: one row per VM that exists at a pass, and one per subscription
#: when the pass over it is complete (a VM listed before and missing from a later complete pass
#: no longer exists: deleted, scaled in or evicted, known from Azure, not guessed from silence)
INVENTORY, INVENTORY_PASS = "Inventory", "InventoryPass"
#: the collector's own decision on acknowledging an event (``[collector.preview_acknowledge]``)
APPROVAL = "Approval"
EVENT_GRID, RESOURCE_GRAPH = "event-grid", "resource-graph"
ACKNOWLEDGE = "acknowledge"  # the collector's own Approval rows
# A status's place in an event's life: how statuses of the same Azure time are ordered.
STATUS_RANK = {"Scheduled": 0, "Started": 1, "Completed": 2, "Canceled": 2}


def platform_record_id(vm: str, event_id: str, status: str, not_before: str | None) -> str:
    """One id per fact, from either channel: the VM, the event and its status; NotBefore only
    where it is part of the fact (Scheduled, and each re-schedule). A Started or Completed status
    is one fact whatever NotBefore the channel shows beside it (Event Grid keeps it filled,
    Resource Graph blanks it once started). The VM's id in any casing is the same VM."""
    nb = (not_before or "") if status == "Scheduled" else ""
    return str(uuid.uuid5(_NAMESPACE, f"{vm.lower()}|{event_id.upper()}|{status}|{nb}"))


DAY_MS = 86_400_000


def restated(row: PlatformRecord, read_ms: int) -> PlatformRecord:
    """A Scheduled status still current when Resource Graph is read, stated again once a day (its
    own fact: still Scheduled on that day), so a log alert's 2-day range holds every event
    announced days ahead; its time is the read time."""
    day = read_ms // DAY_MS
    return replace(
        row,
        RecordId=str(uuid.uuid5(_NAMESPACE, f"{row.RecordId}|still-scheduled|{day}")),
        TimeGenerated=format_ms(read_ms) or "",
        Channel=RESOURCE_GRAPH,
        GridEventId=None,
        CollectedAt=format_ms(read_ms),
    )


def approval_rows(
    event_id: str,
    event_type: str,
    vms: list[tuple[str, str, str | None]],
    when_ms: int,
    acted: str,
    approved_by: str | None,
) -> list[PlatformRecord]:
    """The collector's decision on one event (Channel ``acknowledge``): a row per VM it names
    (resource id, name, scale set), one fact per VM and event: it is decided once."""
    when = format_ms(when_ms)
    out = []
    for rid, name, scale_set in vms:
        parts = rid.lower().split("/")
        out.append(
            PlatformRecord(
                TimeGenerated=when,
                RecordId=str(
                    uuid.uuid5(_NAMESPACE, f"{rid.lower()}|{event_id.upper()}|{APPROVAL}")
                ),
                RecordType=APPROVAL,
                Channel=ACKNOWLEDGE,
                VmResourceId=rid.lower(),
                VmName=name,
                SubscriptionId=parts[2] if len(parts) > 4 else None,
                ResourceGroup=parts[4] if len(parts) > 4 else None,
                ScaleSetName=scale_set,
                EventId=event_id,
                EventType=event_type,
                CollectedAt=when,  # no EventStatus: a decision, not a status of the event
                ApprovedBy=approved_by,
                Acted=acted,
            )
        )
    return out


def annotation_record_id(vm: str, annotation_id: str) -> str:
    return str(uuid.uuid5(_NAMESPACE, f"{vm}|annotation|{annotation_id}"))


def inventory_record_id(resource_id: str, pass_ms: int, scope: str = "") -> str:
    """One fact per VM and pass (a pass lists what exists then)."""
    return str(uuid.uuid5(_NAMESPACE, f"{resource_id.lower()}|inventory|{scope}|{pass_ms}"))


@dataclass(frozen=True, slots=True)
class InventoryVm:
    """A VM as Resource Graph lists it (``resources`` for VMs and Flexible instances,
    ``computeresources`` for Uniform instances)."""

    resource_id: str  # as Azure gives it
    name: str  # as Azure gives it (case kept)
    vm_id: str | None = None
    power_state: str | None = None
    zone: str | None = None
    fault_domain: int | None = None
    tags: dict[str, str] | None = None
    scale_set: str | None = None  # a Flexible instance's scale set (its id names none)


def inventory_rows(
    subscription: str, vms: list[InventoryVm], pass_ms: int, scope: str = ""
) -> list[PlatformRecord]:
    """A complete pass over one subscription: a row per VM it lists, then the InventoryPass row
    that says the pass is complete (written last: a pass cut short has none, so nothing it
    missed is taken for deleted)."""
    when = format_ms(pass_ms) or ""
    out = []
    for vm in vms:
        target = targets(vm.resource_id, [vm.name])[0]
        out.append(
            PlatformRecord(
                TimeGenerated=when,
                RecordId=inventory_record_id(target.resource_id, pass_ms, scope),
                RecordType=INVENTORY,
                Channel=RESOURCE_GRAPH,
                VmResourceId=target.resource_id,
                VmName=vm.name,
                SubscriptionId=target.subscription,
                ResourceGroup=target.resource_group,
                ScaleSetName=vm.scale_set or target.scale_set,
                CollectedAt=when,
                VmId=vm.vm_id,
                PowerState=vm.power_state,
                Zone=vm.zone,
                FaultDomain=vm.fault_domain,
                Tags=dict(vm.tags) if vm.tags else None,
            )
        )
    sub = subscription.lower()
    out.append(
        PlatformRecord(
            TimeGenerated=when,
            RecordId=inventory_record_id(f"/subscriptions/{sub}", pass_ms, scope),
            RecordType=INVENTORY_PASS,
            Channel=RESOURCE_GRAPH,
            VmResourceId=f"/subscriptions/{sub}",
            VmName=None,
            SubscriptionId=sub,
            ResourceGroup=None,
            ScaleSetName=None,
            CollectedAt=when,
            DurationInSeconds=len(vms),
        )
    )
    return out


@dataclass(frozen=True, slots=True)
class PlatformRecord:
    TimeGenerated: str
    RecordId: str
    RecordType: str
    Channel: str
    VmResourceId: str
    VmName: str | None
    SubscriptionId: str | None
    ResourceGroup: str | None
    ScaleSetName: str | None
    EventId: str | None = None
    EventType: str | None = None
    EventStatus: str | None = None
    EventSource: str | None = None
    ResourceType: str | None = None
    Resources: list[str] | None = None
    Description: str | None = None
    DurationInSeconds: int | None = None
    NotBefore: str | None = None
    AnnotationId: str | None = None
    AnnotationName: str | None = None
    AnnotationContext: str | None = None
    AnnotationCategory: str | None = None
    ImpactType: str | None = None
    ImpactStartTime: str | None = None
    ImpactEndTime: str | None = None
    AnnotationReason: str | None = None
    AnnotationSummary: str | None = None
    GridEventId: str | None = None
    CollectedAt: str | None = None
    CollectorVersion: str = __version__
    VmId: str | None = None
    PowerState: str | None = None
    Zone: str | None = None
    FaultDomain: int | None = None
    Tags: dict[str, str] | None = None
    ApprovedBy: str | None = None
    Acted: str | None = None

    table: ClassVar[str] = contract.PLATFORM
    columns: ClassVar[tuple[str, ...]] = ()

    def as_dict(self) -> dict[str, Any]:
        """``dataclasses.asdict`` without its recursion into every value (the collector's rows
        and the benchmarks' millions): the one list and the one dict copied, as it copies them;
        their items are strings."""
        out = {name: getattr(self, name) for name in _FIELDS}
        if self.Resources is not None:
            out["Resources"] = list(self.Resources)
        if self.Tags is not None:
            out["Tags"] = dict(self.Tags)
        return out

    def to_row(self) -> OutboxRow:
        """The outbox row: partition key = the VM, so one VM's rows stay in order."""
        payload = json.dumps(self.as_dict(), separators=(",", ":"), ensure_ascii=False)
        return OutboxRow(
            self.table,
            self.VmResourceId,
            payload,
            len(payload.encode("utf-8")),
            self.EventStatus or self.AnnotationName,
            self.EventType,
        )

    @property
    def order_key(self) -> tuple[str, int]:
        return self.TimeGenerated, STATUS_RANK.get(self.EventStatus or "", 3)


PlatformRecord.columns = contract.table(PlatformRecord.table).column_names
_FIELDS = tuple(f.name for f in fields(PlatformRecord))
