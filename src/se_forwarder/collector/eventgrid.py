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

A body comes from outside and is bounded before it is parsed: at most ``MAX_BODY_BYTES`` (Event
Grid's and Event Hubs' own limit on an event), strict UTF-8, JSON nested at most ``MAX_DEPTH``
deep (Python's parser recurses: a body of nested arrays would reach its recursion limit). What
an event makes is bounded too: rows for at most ``MAX_NAMES`` VMs (the largest scale set; the
names past it counted), ``Resources`` on the first row only (an event naming n VMs costs n rows,
not n x n names), every text value cleaned of lone surrogates and cut to ``MAX_VALUE_BYTES``
(counted, as the agent counts ``TruncatedValues``), and a status outside the documented ones
recorded as reported but counted and named in the log.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .. import textcap, timefmt
from ..errors import UnreadableEvent
from .arm import targets, whole_scale_set
from .record import (
    ANNOTATION,
    EVENT_GRID,
    SCHEDULED_EVENT,
    STATUS_RANK,
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
MAX_BODY_BYTES = 1024 * 1024  # Event Grid's largest event, Event Hubs' largest message
MAX_DEPTH = 32  # an Event Grid event nests 5 deep; Python's parser recurses per level
MAX_NAMES = 1000  # VMs of one event: Azure's largest scale set has 1,000
MAX_ID_CHARS = 2048  # an ARM id; a longer one did not come from Azure
MAX_NAME_CHARS = 256  # a VM's name (Azure's are at most 64, a scale set's VM 80): longer, no row
SHORT_VALUE_BYTES = 1024  # ids, types, statuses: Azure's are short; the Description has 32 KB
STATUSES = frozenset(STATUS_RANK)  # the documented EventStatus values


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
    # the body itself could not be read (not UTF-8, not JSON, too large, too deep): problems[0]
    unreadable_body: bool = False
    rejected: list[tuple[str, Any]] = field(default_factory=list)  # (problem, event) skipped
    names_cut: int = 0  # VM names past MAX_NAMES: no row for them
    truncated_values: int = 0  # text values cut to MAX_VALUE_BYTES (a Resources list is one)
    unknown_statuses: int = 0  # rows whose EventStatus is not a documented one
    notes: list[str] = field(default_factory=list)  # one log line each: cut, unknown status


_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')
_BRACKET = re.compile(r"[\[\]{}]")


def too_deep(text: str, limit: int = MAX_DEPTH) -> bool:
    """JSON ``text`` nests arrays and objects deeper than ``limit`` (strings left out)."""
    if text.count("[") + text.count("{") <= limit:
        return False
    depth = 0
    for m in _BRACKET.finditer(_STRING.sub("", text)):
        if m.group() in "[{":
            depth += 1
            if depth > limit:
                return True
        else:
            depth -= 1
    return False


def read_json(body: bytes | str) -> Any:
    """A message body's JSON, bounded; UnreadableEvent says why it cannot be read."""
    size = len(body) if isinstance(body, bytes) else len(body.encode("utf-8", "surrogatepass"))
    if size > MAX_BODY_BYTES:
        raise UnreadableEvent(f"message body of {size} bytes (limit {MAX_BODY_BYTES})")
    if isinstance(body, bytes):
        try:
            body = body.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise UnreadableEvent(f"message body is not UTF-8: {exc}") from None
    if too_deep(body):
        raise UnreadableEvent(f"message body nests JSON deeper than {MAX_DEPTH} levels")
    try:
        return json.loads(body)
    except ValueError as exc:
        raise UnreadableEvent(f"message body is not JSON: {exc}") from None


def parse_body(body: bytes | str, collected_ms: int) -> Parsed:
    """Never raises on what the body holds: an unreadable body or event is a problem."""
    out = Parsed()
    try:
        doc = read_json(body)
    except UnreadableEvent as exc:
        out.problems.append(str(exc))
        out.unreadable_body = True
        return out
    for item in doc if isinstance(doc, list) else [doc]:
        try:
            env = Envelope.model_validate(item)
        except ValidationError as exc:
            _reject(out, f"not an Event Grid event: {_first_error(exc)}", item)
            continue
        try:
            rows = _rows(env, collected_ms, out)
        except Exception as exc:  # one event must never take its body down
            detail = (
                _first_error(exc)
                if isinstance(exc, ValidationError)
                else str(exc)
                if isinstance(exc, ValueError)
                else f"{type(exc).__name__}: {exc}"
            )
            _reject(out, f"event {textcap.clean(env.id)[:200]}: {detail}", item)
            continue
        if rows is None:
            out.ignored += 1
        else:
            out.notifications.append((textcap.clean(env.id), rows))
    return out


def _reject(out: Parsed, problem: str, item: Any) -> None:
    out.problems.append(problem)
    out.rejected.append((problem, item))


def _first_error(exc: ValidationError) -> str:
    err = exc.errors()[0]
    return f"{'.'.join(map(str, err['loc'])) or 'body'}: {err['msg']}"


def _rows(env: Envelope, collected_ms: int, out: Parsed) -> list[PlatformRecord] | None:
    env.id = _RowValues(out, "")(env.id, "id", SHORT_VALUE_BYTES) or ""
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
        return annotation_rows(info, _event_time(env), collected_ms, EVENT_GRID, env.id, out)
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
    """One row per VM the Scheduled Event names (at most MAX_NAMES), for its status in
    ``props``; the event's ``Resources`` on the first row only."""
    p = ScheduledEventProps.model_validate(props)
    cut = _RowValues(out, p.EventId)
    parent = _parent(_arm_id(event_arm_id))
    names = [textcap.clean(r) for r in p.Resources if len(r) <= MAX_NAME_CHARS]
    if len(names) < len(p.Resources):
        out.names_cut += len(p.Resources) - len(names)
        out.notes.append(
            f"event {cut.event}: {len(p.Resources) - len(names)} name(s) longer than "
            f"{MAX_NAME_CHARS} characters, not recorded"
        )
    vms = targets(parent, names)
    if any(vm.resource_id.endswith(f"/virtualmachinescalesets/{vm.name}") for vm in vms):
        out.unexpanded += 1
    elif whole_scale_set(parent):
        out.expanded += 1
    if len(vms) > MAX_NAMES:
        out.names_cut += len(vms) - MAX_NAMES
        out.notes.append(
            f"event {cut.event} names {len(vms)} VMs: rows for the first {MAX_NAMES}, "
            f"{len(vms) - MAX_NAMES} names not recorded"
        )
        vms = vms[:MAX_NAMES]
    nb_ms = timefmt.parse_not_before_ms(p.NotBefore) if p.NotBefore else None
    not_before = timefmt.format_ms(nb_ms)
    status = cut(p.EventStatus, "EventStatus", SHORT_VALUE_BYTES) or ""
    if status not in STATUSES:
        out.unknown_statuses += len(vms)
        out.notes.append(
            f"event {cut.event}: EventStatus {status[:100]!r} is not one of "
            f"{', '.join(STATUS_RANK)}; recorded as reported"
        )
    event_id = cut(p.EventId, "EventId", SHORT_VALUE_BYTES) or ""
    common: dict[str, Any] = {
        "TimeGenerated": timefmt.format_ms(time_ms) or "",
        "Channel": channel,
        "RecordType": SCHEDULED_EVENT,
        "EventId": event_id,
        "EventType": cut(p.EventType, "EventType", SHORT_VALUE_BYTES),
        "EventStatus": status,
        "EventSource": cut(p.EventSource, "EventSource", SHORT_VALUE_BYTES),
        "ResourceType": cut(p.ResourceType, "ResourceType", SHORT_VALUE_BYTES),
        "Description": cut(p.Description, "Description"),
        "DurationInSeconds": p.DurationInSeconds,
        "NotBefore": not_before,
        "GridEventId": grid_id,
        "CollectedAt": timefmt.format_ms(collected_ms),
    }
    resources = list(cut.names(p.Resources))
    return [
        PlatformRecord(
            RecordId=platform_record_id(vm.resource_id, event_id, status, not_before),
            VmResourceId=vm.resource_id,
            VmName=vm.name,
            SubscriptionId=vm.subscription,
            ResourceGroup=vm.resource_group,
            ScaleSetName=vm.scale_set,
            Resources=resources if i == 0 else None,
            **common,
        )
        for i, vm in enumerate(vms)
    ]


class _RowValues:
    """Cleans and caps an event's text values, counting (and noting once) those it cut."""

    def __init__(self, out: Parsed, event_id: str) -> None:
        self.out = out
        self.event = textcap.clean(event_id)[:200]
        self.fields: list[str] = []

    def __call__(self, text: Any, name: str, limit: int = textcap.MAX_VALUE_BYTES) -> str | None:
        if text is None:
            return None
        kept, served = textcap.cap(str(text), limit)
        if served:
            self._cut(f"{name} ({served} bytes, limit {limit})")
        return kept

    def names(self, names: list[str]) -> tuple[str, ...]:
        kept, cut = textcap.cap_names(names)
        if cut:
            self._cut(f"Resources ({len(names)} names)")
        return kept

    def _cut(self, what: str) -> None:
        self.out.truncated_values += 1
        self.out.notes.append(f"event {self.event}: value cut: {what}")


def _arm_id(value: str) -> str:
    if len(value) > MAX_ID_CHARS:
        raise UnreadableEvent(f"resource id of {len(value)} characters")
    return textcap.clean(value)


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
    info: dict[str, Any],
    time_ms: int,
    collected_ms: int,
    channel: str,
    grid_id: str | None,
    out: Parsed | None = None,
) -> list[PlatformRecord]:
    """One row for the VM an annotation is about."""
    p = _lower_keys(info.get("properties"))
    target = _arm_id(str(p.get("targetresourceid") or ""))
    annotation_id = str(info.get("name") or str(info.get("id") or "").rsplit("/", 1)[-1])
    name = p.get("annotationname")
    if not target or not annotation_id or not name:
        raise UnreadableEvent("an annotation needs targetResourceId, annotationName and an id")
    annotation_id = _arm_id(annotation_id)
    (vm,) = targets(target)[:1]
    cut = _RowValues(out if out is not None else Parsed(), annotation_id)
    impact = cut(p.get("impacttype"), "ImpactType", SHORT_VALUE_BYTES)
    degraded = isinstance(impact, str) and impact.lower() == DEGRADED
    row = PlatformRecord(
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
        AnnotationName=cut(name, "AnnotationName", SHORT_VALUE_BYTES),
        AnnotationContext=cut(p.get("context"), "AnnotationContext", SHORT_VALUE_BYTES),
        AnnotationCategory=cut(p.get("category"), "AnnotationCategory", SHORT_VALUE_BYTES),
        ImpactType=impact,
        ImpactStartTime=_opt_time(p.get("impactstarttime")) if degraded else None,
        ImpactEndTime=_opt_time(p.get("impactendtime")) if degraded else None,
        AnnotationReason=cut(p.get("reason"), "AnnotationReason"),
        AnnotationSummary=cut(p.get("summary"), "AnnotationSummary"),
        GridEventId=grid_id,
        CollectedAt=timefmt.format_ms(collected_ms),
    )
    return [row]
