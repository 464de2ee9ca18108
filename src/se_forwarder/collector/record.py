"""A row of ``ScheduledEventsPlatform_CL``: one status of one Scheduled Event on one VM, or one
Resource Health annotation on one VM, as Azure reported it (docs/record-contract.md §6)."""

from __future__ import annotations

import json
import uuid
from dataclasses import asdict, dataclass
from typing import Any, ClassVar

from .. import __version__, contract
from ..outbox import OutboxRow

_NAMESPACE = uuid.UUID("0b7c36f2-5a61-4a8e-9d43-7e2f18c4b9d1")
SCHEDULED_EVENT, ANNOTATION = "ScheduledEvent", "Annotation"
EVENT_GRID, RESOURCE_GRAPH = "event-grid", "resource-graph"
# A status's place in an event's life: how statuses of the same Azure time are ordered.
STATUS_RANK = {"Scheduled": 0, "Started": 1, "Completed": 2, "Canceled": 2}


def platform_record_id(vm: str, event_id: str, status: str, not_before: str | None) -> str:
    """Same VM, event, status and NotBefore → same id, from either channel."""
    return str(uuid.uuid5(_NAMESPACE, f"{vm}|{event_id}|{status}|{not_before or ''}"))


def annotation_record_id(vm: str, annotation_id: str) -> str:
    return str(uuid.uuid5(_NAMESPACE, f"{vm}|annotation|{annotation_id}"))


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

    table: ClassVar[str] = contract.PLATFORM
    columns: ClassVar[tuple[str, ...]] = ()

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

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
