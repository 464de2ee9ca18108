"""The domain types, as plain frozen dataclasses: what IMDS served (``EventView``, ``Document``),
whose VM it is (``VmIdentity``) and the rows the agent emits (``LifecycleRecord``, ``Heartbeat``;
record-contract.md §2 and §3).

Row field names are the Log Analytics column names, in ``contract.json`` order; a test holds the
two together. Datetimes are already formatted strings and ``Resources`` a list, so ``as_dict`` is
ready for JSON without conversion. pydantic lives at the edges (``imds.parse``, ``config``); the
tracker only ever sees these types.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from enum import StrEnum
from typing import Any, ClassVar

from . import __version__, contract

_RECORD_NAMESPACE = uuid.UUID("6f1c4a52-3b8e-4f5e-9a57-5c0b2d1e7a10")


class Phase(StrEnum):
    """A lifecycle record's ``Phase`` (record-contract.md §2)."""

    FIRST_SEEN = "FirstSeen"
    UPDATED = "Updated"  # re-scheduled: NotBefore, duration, resources, type or text changed
    STARTED = "Started"  # the impact has begun (the event's status became Started)
    REMOVED = "Removed"  # no longer served
    APPROVED = "Approved"  # this VM approved it (it may start early)
    # A Kubernetes node's drain by policy (kube/): one record per step, NodeDetail says what
    NODE_CORDONED = "NodeCordoned"  # this agent cordoned the node (and took it out of LBs)
    NODE_CORDON_SKIPPED = "NodeCordonSkipped"  # already cordoned by someone else: not ours
    NODE_DRAINED = "NodeDrained"  # every pod it may evict is gone
    NODE_DRAIN_FAILED = "NodeDrainFailed"  # the deadline or the event's start came first
    NODE_UNCORDONED = "NodeUncordoned"  # after the event, the cordon this agent made undone


class EventStatus(StrEnum):
    """An event's ``EventStatus`` as IMDS serves it (not a hook's state: ``hooks.HookState``)."""

    SCHEDULED = "Scheduled"
    STARTED = "Started"  # the impact has begun


class Outcome(StrEnum):
    """What a ``Removed`` record says became of the event (its ``Outcome`` column)."""

    COMPLETED = "Completed"  # seen Started, then removed
    CANCELLED = "Cancelled"  # removed while still Scheduled
    UNKNOWN = "Unknown"  # it may have run unseen: across a restart or a long gap


class ApprovedBy(StrEnum):
    """Who let an event start (a record's ``ApprovedBy``, record-contract.md §2)."""

    THIS_VM = "ThisVm"  # this agent's approval was accepted
    AZURE_POLICY = "AzurePolicy"  # userInitiatedReboot/Redeploy automaticallyApprove
    ELSEWHERE = "Elsewhere"  # early, not by this VM: another VM, an acknowledgement, the platform
    NO_NOTICE = "NoNotice"  # first seen Started from Platform: a failure, or started unannounced
    AT_NOT_BEFORE = "AtNotBefore"  # nobody approved it early
    # the collector, through Azure's acknowledge API (preview), for a VM without an agent: on the
    # platform table's Approval rows only (an agent's VM is never approved by the collector)
    COLLECTOR = "Collector"


PHASES = tuple(Phase)
# The node steps' phases (kube/): only on a Kubernetes node with a drain rule
NODE_PHASES = (
    Phase.NODE_CORDONED,
    Phase.NODE_CORDON_SKIPPED,
    Phase.NODE_DRAINED,
    Phase.NODE_DRAIN_FAILED,
    Phase.NODE_UNCORDONED,
)
# What IMDS serves today (others are passed through as served; policies and labels name these).
EVENT_TYPES = ("Freeze", "Reboot", "Redeploy", "Preempt", "Terminate")
EVENT_SOURCES = ("Platform", "User")
EVENT_STATUSES = tuple(EventStatus)


def vm_name_key(name: str) -> str:
    """How VM names compare (record-contract.md, ``AffectsThisVm``): case-insensitive, the
    leading ``_`` of old api-versions ignored. The one home of this rule."""
    return name.lstrip("_").lower()


@dataclass(frozen=True, slots=True)
class EventView:
    """One event as served in one document."""

    event_id: str
    event_type: str
    status: str
    resource_type: str | None
    resources: tuple[str, ...]
    description: str | None
    source: str | None
    duration: int | None
    not_before_raw: str | None  # as served ("" once Started; None when absent)
    not_before_ms: int | None  # parsed; None when empty, absent or unparseable

    def content_key(
        self,
    ) -> tuple[int | str | None, int | None, tuple[str, ...], str, str | None, str | None]:
        """What a re-schedule (``Updated``) can change: everything but status and ResourceType."""
        nb = self.not_before_ms if self.not_before_ms is not None else self.not_before_raw
        return (nb, self.duration, self.resources, self.event_type, self.description, self.source)


@dataclass(frozen=True, slots=True)
class EventProblem:
    """An event of a document that could not be taken as served (record-contract.md §1)."""

    event_id: str | None  # None when the EventId itself is unusable
    reason: str  # one line: "DurationInSeconds: Input should be a valid integer", ...
    kind: str = "malformed"  # "malformed" (changes nothing for its EventId) or "repeated"


@dataclass(frozen=True, slots=True)
class Document:
    incarnation: int
    events: tuple[EventView, ...]  # the well-formed events, in document order
    held: tuple[str, ...] = ()  # EventIds served malformed: their tracked state is kept as is
    problems: tuple[EventProblem, ...] = ()
    truncated: int = 0  # values cut to the per-value limit
    # False when an event came without a usable EventId, or was not taken (``excess``): it may
    # be any tracked event, so this document removes none of them.
    complete: bool = True
    excess: int = 0  # events not taken: past the per-document limits (imds/parse.py)
    # the values cut, each as (EventId, field, size served): a value served again in later
    # documents is the same value, counted once (recording/doc_problems.py)
    cut: tuple[tuple[str, str, int], ...] = ()


def record_id(vm_key: str, event_id: str, phase: str, incarnation: int | None = None) -> str:
    """Deterministic idempotency key: same (VM, EventId, Phase[, incarnation]) → same id.
    ``vm_key``: whose records these are (``VmIdentity.key``), its one meaning."""
    name = f"{vm_key}|{event_id}|{phase}" + (f"|{incarnation}" if phase == Phase.UPDATED else "")
    return str(uuid.uuid5(_RECORD_NAMESPACE, name))


@dataclass(frozen=True, slots=True)
class VmIdentity:
    """The VM identity columns, from the instance document (all None in ``replay``)."""

    Computer: str | None = None
    VmName: str | None = None
    VmId: str | None = None
    VmResourceId: str | None = None
    SubscriptionId: str | None = None
    ResourceGroup: str | None = None
    Location: str | None = None
    Zone: str | None = None
    ScaleSetName: str | None = None
    FaultDomain: int | None = None
    UpdateDomain: int | None = None
    AgentVersion: str = __version__
    # True once the instance document has answered: the columns above are the VM's own. False
    # before (VmId null; VmName null unless agent.vm_name is set, so AffectsThisVm is null).
    IdentityKnown: bool = False
    # The tags ``agent.tags`` chose, by the chosen name (imds/tags.py); None: none chosen.
    Tags: dict[str, str] | None = field(default=None, hash=False)
    # On a Kubernetes node ([kubernetes]): the node, its pool and its cluster; else None.
    NodeName: str | None = None
    NodePool: str | None = None
    Cluster: str | None = None

    @property
    def key(self) -> str:
        """Whose records these are, in RecordIds. VmName before Computer: ``replay`` knows only
        the VM name, and its RecordIds must not depend on the machine it runs on."""
        return self.VmId or self.VmName or self.Computer or "unknown"

    @property
    def partition_key(self) -> str:
        """Event Hubs partition key, per record-contract.md §4: VmId, or Computer when unknown."""
        return self.VmId or self.Computer or self.VmName or "unknown"

    def affects(self, resources: tuple[str, ...]) -> bool | None:
        """Is this VM named in ``Resources``? Case-insensitive; old api-versions' ``_`` ignored."""
        if not self.VmName:
            return None
        me = vm_name_key(self.VmName)
        return any(vm_name_key(r) == me for r in resources)


class _Row:
    """What the two tables' rows share: the VM identity columns come from ``vm`` (written once,
    in ``VmIdentity``), and serialisation writes the columns in contract.json order."""

    __slots__ = ()
    table: ClassVar[str]
    columns: ClassVar[tuple[str, ...]]  # contract.json's order
    vm: VmIdentity

    def __getattr__(self, name: str) -> Any:  # the identity columns, read through ``vm``
        if name in IDENTITY_FIELDS:
            return getattr(self.vm, name)
        raise AttributeError(f"{type(self).__name__!r} has no attribute {name!r}")

    def as_dict(self) -> dict[str, Any]:
        vm = self.vm
        return {
            name: getattr(vm, name) if name in IDENTITY_FIELDS else getattr(self, name)
            for name in self.columns
        }

    def to_json(self) -> str:
        return json.dumps(self.as_dict(), separators=(",", ":"), ensure_ascii=False)


@dataclass(frozen=True, slots=True)
class LifecycleRecord(_Row):
    TimeGenerated: str
    RecordId: str
    Phase: str
    Outcome: str | None
    EventId: str
    EventType: str
    EventStatus: str
    EventSource: str | None
    ResourceType: str | None
    Resources: list[str]
    Description: str | None
    DurationInSeconds: int | None
    NotBefore: str | None
    DocumentIncarnation: int
    FirstSeenAt: str
    StartedAt: str | None
    NoticeSeconds: float | None
    SinceFirstSeenSeconds: float
    StartDelaySeconds: float | None
    SinceStartedSeconds: float | None
    UncertaintySeconds: float | None
    AffectsThisVm: bool | None
    vm: VmIdentity  # Computer, VmName, VmId, ... AgentVersion
    ApprovedBy: str | None = None  # an ``ApprovedBy``: who let a started event start
    Acted: str | None = None  # what this VM's policy did for the event so far, in words
    NodeDetail: str | None = None  # the node steps' (Phase Node*) words; else None

    table: ClassVar[str] = contract.RECORDS


@dataclass(frozen=True, slots=True)
class Heartbeat(_Row):
    """The agent's health columns come from ``health.Snapshot``'s declaration (``values``, by
    column name); a test holds them to contract.json's heartbeat table."""

    TimeGenerated: str
    RecordId: str
    Reason: str
    vm: VmIdentity  # Computer, VmName, VmId, ... AgentVersion
    values: Mapping[str, Any]  # UptimeSeconds, Polls, ... DryRunDecisions

    table: ClassVar[str] = contract.HEARTBEATS

    def __getattr__(self, name: str) -> Any:
        if name in self.values:
            return self.values[name]
        return _Row.__getattr__(self, name)

    def as_dict(self) -> dict[str, Any]:
        vm, values = self.vm, self.values
        return {
            name: getattr(vm, name)
            if name in IDENTITY_FIELDS
            else values[name]
            if name in values
            else getattr(self, name)
            for name in self.columns
        }


IDENTITY_FIELDS = frozenset(f.name for f in fields(VmIdentity))
LifecycleRecord.columns = contract.table(contract.RECORDS).column_names
Heartbeat.columns = contract.table(contract.HEARTBEATS).column_names
