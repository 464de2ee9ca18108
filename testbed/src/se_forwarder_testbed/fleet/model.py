"""What a simulated fleet is made of: VMs, agent runs, events and delivery trouble (the plan),
and the facts a test checks the fleet view against (the truth). Times are epoch milliseconds."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from se_forwarder.model import VmIdentity

SECOND = 1000
MINUTE = 60 * SECOND
HOUR = 60 * MINUTE
DAY = 24 * HOUR


@dataclass(frozen=True, slots=True)
class Update:
    """A re-schedule while the event is still Scheduled: the fields it changes."""

    at: int
    not_before: int | None = None
    event_type: str | None = None
    duration: int | None = None
    resources: tuple[str, ...] | None = None


@dataclass(slots=True)
class EventPlan:
    """One platform (or user) event: who sees it, what it says, and when it moves."""

    event_id: str
    event_type: str
    audience: tuple[str, ...]  # VM names whose documents carry it
    resources: tuple[str, ...]  # VM names it affects (as served)
    appear: int
    not_before: int | None  # None: it appears already Started (no notice)
    start: int | None  # None: never starts
    remove: int | None  # None: still in the documents at the end (or its VMs are gone)
    source: str = "Platform"
    duration: int = -1
    description: str = "Host server maintenance."
    updates: list[Update] = field(default_factory=list)
    approvals: dict[str, int] = field(default_factory=dict)  # VM name -> when it approved
    kind: str = ""  # what the scenario meant it to show (for reading the truth)


@dataclass(frozen=True, slots=True)
class Outage:
    """Deliveries fail from ``start`` to ``end``, one failed attempt every ``retry`` ms. Rows
    wait in the spool until ``end`` (rows beyond a spool depth of ``drop_after`` are dropped);
    or, with ``slowdown``, some attempts succeed: a row created ``x`` ms into the outage waits
    ``x * slowdown`` ms, so the backlog grows while heartbeats still get through."""

    start: int
    end: int
    retry: int = 30 * SECOND
    drop_after: int | None = None
    slowdown: float | None = None


@dataclass(frozen=True, slots=True)
class PollErrors:
    """From ``start`` to ``end``, one poll in ``every`` fails."""

    start: int
    end: int
    every: int


@dataclass(slots=True)
class Run:
    """One run of the agent process: from ``start`` to ``end`` (None: still running at the
    data's end); ``clean`` says whether it sent a stop heartbeat."""

    start: int
    end: int | None
    clean: bool = True
    version: str = "0.1.0"


@dataclass(slots=True)
class VmPlan:
    vm: VmIdentity
    runs: list[Run]
    outages: list[Outage] = field(default_factory=list)
    poll_errors: list[PollErrors] = field(default_factory=list)
    duplicate_every: int = 40  # about one row in this many is delivered twice (a late copy)
    fate: str = "reporting"  # what the scenario did to it (for reading the truth)
    #: when the VM stopped existing (deleted, scaled in, evicted, replaced by a new VmId); None:
    #: it exists at the end (maybe stopped or deallocated)
    gone_at: int | None = None
    #: how it went: "terminate" / "preempt" (an event says so) or "no-notice" (scale-in or
    #: deletion with no Terminate event: nothing in the data tells it from a dead agent) or
    #: "replaced" (a new VmId reports under its resource id)
    gone_how: str | None = None
    lag: tuple[int, int] = (3 * SECOND, 45 * SECOND)  # ingestion lag of a row, ms (min, max)


@dataclass(slots=True)
class VmTruth:
    """What happened to one VM, as planned."""

    name: str
    vm_id: str
    resource_id: str
    fate: str  # reporting, silent-stop, evicted-and-back, deleted, crash-loop, ...
    runs: list[Run]
    last_heartbeat: int | None = None  # TimeGenerated of its last heartbeat (ms)
    last_reason: str | None = None
    gone_at: int | None = None  # VmPlan.gone_at
    gone_how: str | None = None
    vm_name: str = ""  # the VM's name (``name`` is the plan's key: a recreated VM has its own)
    outages: list[Outage] = field(default_factory=list)
    tags: dict[str, str] = field(default_factory=dict)  # the chosen tags it carries (plan.tags_of)
    scale_set: str | None = None
    resource_group: str = ""
    zone: str | None = None
    fault_domain: int | None = None

    def service(self, tag: str = "service") -> str:
        """The VM's service as the fleet view defines it (dashboards/definitions/
        fleet-vms.kql), from the plan: its tag, else its scale set, else its resource group,
        qualified by subscription and group (the same names elsewhere are other services)."""
        if self.tags.get(tag):
            return self.tags[tag]
        sub = self.resource_id.split("/")[2] if self.resource_id else ""
        if self.scale_set:
            return f"scale set: {sub}/{self.resource_group}/{self.scale_set}".lower()
        return f"resource group: {sub}/{self.resource_group}".lower()

    def running(self, t: int) -> bool:
        """The agent process runs at ``t``."""
        return any(r.start <= t and (r.end is None or t < r.end) for r in self.runs)

    def last_stop(self, t: int) -> Run | None:
        """The last run that ended at or before ``t`` (None: none did)."""
        ended = [r for r in self.runs if r.end is not None and r.end <= t]
        return max(ended, key=lambda r: r.end or 0) if ended else None  # each ended: r.end set


@dataclass(frozen=True, slots=True)
class PlatformFact:
    """What Azure's own record says of one event on one VM by the data's end (azure_record.py): the
    truth the platform views are checked against."""

    event_id: str
    vm_key: str  # subscription/resource group/VM name, lower case
    vm_name: str
    resource_group: str
    event_type: str  # as announced (the last type served before it started or went away)
    duration: int
    status: str  # Scheduled, Started, Completed or Canceled at the end
    appear: int
    not_before: int | None  # the last NotBefore announced (None: no notice)
    started_at: int | None
    ended_at: int | None
    annotation: str | None  # what the platform says happened (None: no annotation)
    impact: str | None
    verdict: str  # as announced, other than announced, failed, no annotation
    agent: bool  # an agent ran on the VM at some time
    kind: str


@dataclass(slots=True)
class Truth:
    """The plan the rows were generated from, for tests that need the facts behind them."""

    start: int
    end: int
    events: dict[str, EventPlan]
    vms: dict[str, VmTruth]  # by VM name (the plan's key: a recreated VM is ``name~2``)
    #: Azure's own record per event and VM (``FleetSpec.platform``; azure_record.py), agentless VMs
    #: too
    platform: list[PlatformFact] = field(default_factory=list)

    def open_at(self, t: int) -> set[str]:
        """The events in the documents at ``t`` (announced, not yet removed), platform-side."""
        return {
            eid
            for eid, e in self.events.items()
            if e.appear <= t and (e.remove is None or t < e.remove)
        }


@dataclass(slots=True)
class Fleet:
    """Rows in the contract's shape (each with ``_IngestionTime``) and the truth behind them."""

    records: list[dict[str, Any]]
    heartbeats: list[dict[str, Any]]
    truth: Truth
    platform: list[dict[str, Any]] = field(default_factory=list)  # ScheduledEventsPlatform_CL
