"""Event Grid notifications (as an Event Hub delivers them) → platform rows. Pure.

A message body holds one event or a JSON array of them, in the Event Grid schema (``eventType``,
``eventTime``, ``topic``) or CloudEvents 1.0 (``type``, ``time``, ``source``). Two system topics
matter:

* ``Microsoft.ResourceNotifications.MaintenanceResources``: a Scheduled Event's status change.
  Microsoft's page names the event type both ``…MaintenanceResources.ScheduledEventEmitted``
  and ``microsoft.maintenance/scheduledevents/write``; both are read, in any case.
* ``Microsoft.ResourceNotifications.HealthResources``, event type ``…ResourceAnnotated``: what the
  platform says it did to a VM.

Anything else (e.g. ``AvailabilityStatusChanged``) is counted as ignored. An event that cannot be
read is a problem (one line each), never an exception: the others of the body go on.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .. import timefmt
from ..errors import UnreadableEvent
from .arm import targets, whole_scale_set
from .record import (
    ANNOTATION,
    EVENT_GRID,
    SCHEDULED_EVENT,
    PlatformRecord,
    annotation_record_id,
    platform_record_id,
)

SCHEDULED_TYPES = frozenset(
    {
        "microsoft.resourcenotifications.maintenanceresources.scheduledeventemitted",
        "microsoft.maintenance/scheduledevents/write",
    }
)
ANNOTATED_TYPES = frozenset({"microsoft.resourcenotifications.healthresources.resourceannotated"})
DEGRADED = "degraded"


class Envelope(BaseModel):
    """An Event Grid or CloudEvents envelope (only what the collector reads)."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True)
    id: str = Field(min_length=1)
    event_type: str = Field(validation_alias="eventType", default="")
    type: str = ""
    event_time: str | None = Field(validation_alias="eventTime", default=None)
    time: str | None = None
    subject: str | None = None
    data: dict[str, Any]

    @property
    def kind(self) -> str:
        return (self.event_type or self.type).lower()

    @property
    def when(self) -> str | None:
        return self.event_time or self.time


class ScheduledEventProps(BaseModel):
    model_config = ConfigDict(extra="ignore")
    EventId: str = Field(min_length=1)
    EventStatus: str = Field(min_length=1)
    EventType: str | None = None
    ResourceType: str | None = None
    Resources: list[str] = Field(default_factory=list)
    NotBefore: str | None = None
    Description: str | None = None
    EventSource: str | None = None
    DurationInSeconds: int | None = None


@dataclass
class Parsed:
    """What one message body gave: rows per Event Grid id, problems, ignored event types."""

    notifications: list[tuple[str | None, list[PlatformRecord]]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    ignored: int = 0
    expanded: int = 0  # scale-set events given one row per VM the event names
    unexpanded: int = 0  # scale-set events without VM names (kept on the scale set's id)


def parse_body(body: bytes | str, collected_ms: int) -> Parsed:
    out = Parsed()
    try:
        doc = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        out.problems.append(f"message body is not JSON: {exc}")
        return out
    for item in doc if isinstance(doc, list) else [doc]:
        try:
            env = Envelope.model_validate(item)
        except ValidationError as exc:
            out.problems.append(f"not an Event Grid event: {_first_error(exc)}")
            continue
        try:
            rows = _rows(env, collected_ms, out)
        except (ValidationError, ValueError) as exc:
            detail = _first_error(exc) if isinstance(exc, ValidationError) else str(exc)
            out.problems.append(f"event {env.id}: {detail}")
            continue
        if rows is None:
            out.ignored += 1
        else:
            out.notifications.append((env.id, rows))
    return out


def _first_error(exc: ValidationError) -> str:
    err = exc.errors()[0]
    return f"{'.'.join(map(str, err['loc'])) or 'body'}: {err['msg']}"


def _rows(env: Envelope, collected_ms: int, out: Parsed) -> list[PlatformRecord] | None:
    info = env.data.get("resourceInfo")
    if env.kind in SCHEDULED_TYPES:
        if not isinstance(info, dict):
            raise UnreadableEvent("data.resourceInfo is missing")
        return scheduled_rows(
            str(info.get("id") or env.subject or ""),
            info.get("properties"),
            _event_time(env),
            collected_ms,
            EVENT_GRID,
            env.id,
            out,
        )
    if env.kind in ANNOTATED_TYPES:
        if not isinstance(info, dict):
            raise UnreadableEvent("data.resourceInfo is missing")
        return annotation_rows(info, _event_time(env), collected_ms, EVENT_GRID, env.id)
    return None


def _event_time(env: Envelope) -> int:
    operational = env.data.get("operationalInfo")
    when = (operational or {}).get("resourceEventTime") if isinstance(operational, dict) else None
    when = when or env.when
    if not when:
        raise UnreadableEvent("no eventTime")
    return timefmt.parse_iso_ms(str(when))


def scheduled_rows(
    event_arm_id: str,
    props: Any,
    time_ms: int,
    collected_ms: int,
    channel: str,
    grid_id: str | None,
    out: Parsed,
) -> list[PlatformRecord]:
    """One row per VM the Scheduled Event names, for its status in ``props``."""
    p = ScheduledEventProps.model_validate(props)
    parent = _parent(event_arm_id)
    vms = targets(parent, p.Resources)
    if any(vm.resource_id.endswith(f"/virtualmachinescalesets/{vm.name}") for vm in vms):
        out.unexpanded += 1
    elif whole_scale_set(parent):
        out.expanded += 1
    nb_ms = timefmt.parse_not_before_ms(p.NotBefore) if p.NotBefore else None
    not_before = timefmt.format_ms(nb_ms)
    status = p.EventStatus
    return [
        PlatformRecord(
            TimeGenerated=timefmt.format_ms(time_ms) or "",
            Channel=channel,
            RecordId=platform_record_id(vm.resource_id, p.EventId, status, not_before),
            RecordType=SCHEDULED_EVENT,
            VmResourceId=vm.resource_id,
            VmName=vm.name,
            SubscriptionId=vm.subscription,
            ResourceGroup=vm.resource_group,
            ScaleSetName=vm.scale_set,
            EventId=p.EventId,
            EventType=p.EventType,
            EventStatus=status,
            EventSource=p.EventSource,
            ResourceType=p.ResourceType,
            Resources=list(p.Resources),
            Description=p.Description,
            DurationInSeconds=p.DurationInSeconds,
            NotBefore=not_before,
            GridEventId=grid_id,
            CollectedAt=timefmt.format_ms(collected_ms),
        )
        for vm in vms
    ]


def _parent(event_arm_id: str) -> str:
    lower = event_arm_id.lower()
    cut = lower.find("/providers/microsoft.maintenance/")
    return event_arm_id if cut < 0 else event_arm_id[:cut]


def _lower_keys(props: Any) -> dict[str, Any]:
    if not isinstance(props, dict):
        raise UnreadableEvent("resourceInfo.properties is not an object")
    return {str(k).lower(): v for k, v in props.items()}


def _opt_time(value: Any) -> str | None:
    if not value:
        return None
    return timefmt.format_ms(timefmt.parse_iso_ms(str(value)))


def annotation_rows(
    info: dict[str, Any], time_ms: int, collected_ms: int, channel: str, grid_id: str | None
) -> list[PlatformRecord]:
    """One row for the VM an annotation is about."""
    p = _lower_keys(info.get("properties"))
    target = str(p.get("targetresourceid") or "")
    annotation_id = str(info.get("name") or str(info.get("id") or "").rsplit("/", 1)[-1])
    name = p.get("annotationname")
    if not target or not annotation_id or not name:
        raise UnreadableEvent("an annotation needs targetResourceId, annotationName and an id")
    (vm,) = targets(target)[:1]
    impact = p.get("impacttype")
    degraded = isinstance(impact, str) and impact.lower() == DEGRADED
    return [
        PlatformRecord(
            TimeGenerated=timefmt.format_ms(time_ms) or "",
            Channel=channel,
            RecordId=annotation_record_id(vm.resource_id, annotation_id),
            RecordType=ANNOTATION,
            VmResourceId=vm.resource_id,
            VmName=vm.name,
            SubscriptionId=vm.subscription,
            ResourceGroup=vm.resource_group,
            ScaleSetName=vm.scale_set,
            AnnotationId=annotation_id,
            AnnotationName=str(name),
            AnnotationContext=p.get("context"),
            AnnotationCategory=p.get("category"),
            ImpactType=impact,
            ImpactStartTime=_opt_time(p.get("impactstarttime")) if degraded else None,
            ImpactEndTime=_opt_time(p.get("impactendtime")) if degraded else None,
            AnnotationReason=p.get("reason"),
            AnnotationSummary=p.get("summary"),
            GridEventId=grid_id,
            CollectedAt=timefmt.format_ms(collected_ms),
        )
    ]
