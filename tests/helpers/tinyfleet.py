"""Small focused datasets for the fleet view's defect tests, built with the project's own types:
records from ``tracker.observe`` on ``model.Document`` / ``EventView``, heartbeats from
``health.Snapshot.heartbeat``; the test chooses the moments, the counters and the ingestion
times (at-least-once copies included)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from se_forwarder import tracker
from se_forwarder.health import OpenEvent, Snapshot
from se_forwarder.model import Document, EventView, VmIdentity
from se_forwarder.report import Engine
from se_forwarder.timefmt import format_ms, to_ms

from . import fleetview as fv

NOW = datetime(2026, 5, 4, 12, 0)
SUB = "11111111-2222-3333-4444-555555555555"


def iso(t: datetime) -> str:
    """A naive UTC datetime in the contract's format."""
    return format_ms(to_ms(_aware(t)))


def vm(
    name: str,
    *,
    zone: str | None = "1",
    rg: str = "rg-a",
    scale_set: str | None = None,
    fd: int = 0,
    ud: int = 0,
) -> VmIdentity:
    rid = (
        f"/subscriptions/{SUB}/resourceGroups/{rg}"
        f"/providers/Microsoft.Compute/virtualMachines/{name}"
    )
    return VmIdentity(
        Computer=name,
        VmName=name,
        VmId=str(uuid.uuid5(uuid.NAMESPACE_URL, rid)),
        VmResourceId=rid,
        SubscriptionId=SUB,
        ResourceGroup=rg,
        Location="westeurope",
        Zone=zone,
        ScaleSetName=scale_set,
        FaultDomain=fd,
        UpdateDomain=ud,
    )


def event(
    eid: str,
    etype: str,
    status: str,
    resources: tuple[str, ...],
    not_before: datetime | None,
    duration: int = -1,
    source: str = "Platform",
) -> EventView:
    nb_ms = None if not_before is None or status == "Started" else to_ms(_aware(not_before))
    raw = (
        ""
        if status == "Started"
        else (None if not_before is None else not_before.isoformat() + "Z")
    )
    return EventView(
        eid, etype, status, "VirtualMachine", resources, "test", source, duration, raw, nb_ms
    )


def _aware(t: datetime) -> datetime:
    from datetime import UTC

    return t.replace(tzinfo=UTC)


@dataclass
class Tiny:
    """Rows of a few VMs; ``engine()`` loads them."""

    records: list[dict] = field(default_factory=list)
    heartbeats: list[dict] = field(default_factory=list)
    states: dict[str, tracker.TrackerState] = field(default_factory=dict)

    def poll(
        self,
        who: VmIdentity,
        t: datetime,
        events: list[EventView],
        *,
        incarnation: int,
        lag: timedelta = timedelta(seconds=20),
        restarted: bool = False,
    ) -> list[dict]:
        """The agent of ``who`` polls at ``t`` (and at ``t`` - 1 s, unchanged, unless it just
        restarted) and gets ``events``; its records arrive ``lag`` later."""
        st = self.states.get(who.VmName, tracker.TrackerState())
        if restarted:
            st = tracker.restarted(st)
        elif st.last_doc is not None:
            st = tracker.observe(st, to_ms(_aware(t)) - 1000, st.last_doc, who).state
        obs = tracker.observe(st, to_ms(_aware(t)), Document(incarnation, tuple(events)), who)
        self.states[who.VmName] = obs.state
        rows = [{**r.as_dict(), "_IngestionTime": iso(t + lag)} for r in obs.records]
        self.records += rows
        return rows

    def approve(self, who: VmIdentity, t: datetime, eid: str) -> None:
        obs = tracker.approved(self.states[who.VmName], to_ms(_aware(t)), [eid], who)
        self.states[who.VmName] = obs.state
        self.records += [
            {**r.as_dict(), "_IngestionTime": iso(t + timedelta(seconds=5))} for r in obs.records
        ]

    def beat(
        self,
        who: VmIdentity,
        t: datetime,
        reason: str = "periodic",
        *,
        uptime: float,
        lag: timedelta = timedelta(seconds=10),
        version: str = "0.1.0",
        **counters: Any,
    ) -> dict:
        """A heartbeat from ``Snapshot.heartbeat``; open events from the VM's tracker state."""
        st = self.states.get(who.VmName, tracker.TrackerState())
        snap = Snapshot(
            uptime_seconds=uptime,
            polls=counters.get("polls", int(uptime)),
            poll_errors=counters.get("poll_errors", 0),
            last_poll_latency_ms=2.0,
            last_incarnation=st.last_incarnation,
            open_events=tuple(
                OpenEvent(
                    eid,
                    te.view.event_type,
                    te.view.status,
                    te.view.source,
                    format_ms(te.view.not_before_ms),
                    te.view.duration,
                    who.affects(te.view.resources),
                )
                for eid, te in st.events.items()
            ),
            delivered=counters.get("delivered", 0),
            failed_deliveries=counters.get("failed", 0),
            dropped=counters.get("dropped", 0),
            dead_lettered=counters.get("dead", 0),
            spool_depth=counters.get("spool", 0),
            hooks_succeeded=counters.get("hooks_ok", 0),
            hooks_failed=counters.get("hooks_failed", 0),
            approvals_sent=counters.get("approvals_sent", 0),
            approvals_failed=counters.get("approvals_failed", 0),
        )
        from dataclasses import replace

        row = snap.heartbeat(
            reason, replace(who, AgentVersion=version), iso(t), str(uuid.uuid4())
        ).as_dict()
        row["_IngestionTime"] = iso(t + lag)
        self.heartbeats.append(row)
        return row

    def beats(
        self,
        who: VmIdentity,
        start: datetime,
        end: datetime,
        *,
        run_start: datetime | None = None,
        every: timedelta = timedelta(minutes=5),
        first: str = "periodic",
        **counters: Any,
    ) -> None:
        """Periodic heartbeats from ``start`` to ``end`` of one run (counters fixed)."""
        run_start = run_start or start
        t, reason = start, first
        while t <= end:
            self.beat(who, t, reason, uptime=(t - run_start).total_seconds() + 0.5, **counters)
            t, reason = t + every, "periodic"

    def redeliver(self, row: dict, later: timedelta) -> None:
        """At-least-once: the same row arrives again ``later``."""
        copy = {**row, "_IngestionTime": iso(fv.ts(row["_IngestionTime"]) + later)}
        (self.records if "Phase" in row else self.heartbeats).append(copy)

    def engine(self, now: datetime = NOW) -> Engine:
        return Engine(self.records, self.heartbeats, now=now)
