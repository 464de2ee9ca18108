"""The platform side of a churning fleet's truth, shared by the queries' tests
(tests/fleet_view/test_platform_collected.py) and the report's
(tests/report/test_report_platform.py):
what Azure's record of each event and VM says and how it checks against the agents' words."""

from __future__ import annotations

from datetime import timedelta

from helpers import fleetchurn as fc
from helpers import fleetview as fv
from se_forwarder_testbed.fleet import FleetSpec

SPEC = FleetSpec(vms=52, days=3, churn=True, seed=16, platform=True)
SPAN = timedelta(days=14)
SETTLED = timedelta(minutes=10)  # Azure's time to the workspace: 1 to 4 minutes (+ annotations' 5)
VERIFIED = {"Completed": "Completed", "Canceled": "Canceled"}


def settled(f, now) -> bool:
    """The fact's last change reached the workspace by ``now``."""
    last = max(t for t in (f.appear, f.started_at, f.ended_at) if t is not None)
    return fc.dt(last) + SETTLED <= now


def agent_words(fleet, now) -> dict[tuple[str, str], dict]:
    """Per (event, VM key): the VM's agents' latest record of the event."""
    out: dict[tuple[str, str], dict] = {}
    for r in fv.dedupe(fv.visible(fleet.records, now, SPAN)):
        if not r["VmId"] or r["Phase"] == "Approved":
            continue
        k = (
            r["EventId"].lower(),
            f"{r['SubscriptionId']}/{r['ResourceGroup']}/{r['VmName']}".lower(),
        )
        if k not in out or fv.at(r) >= fv.at(out[k]):
            out[k] = r
    return out


def expected_checks(fleet, now) -> dict[tuple[str, str], tuple[str, str, str]]:
    """(EventId, VmName) -> (PlatformStatus, VerifiedOutcome, Check) for settled facts."""
    words = agent_words(fleet, now)
    out = {}
    for f in fleet.truth.platform:
        if not settled(f, now):
            continue
        w = words.get((f.event_id.lower(), f.vm_key))
        # a Preempt or Terminate its agent saw start took the VM with it (the end is never seen)
        went = (
            w is not None and w["Phase"] == "Started" and w["EventType"] in ("Preempt", "Terminate")
        )
        agent = (
            "no record"
            if w is None
            else f"Completed ({'evicted' if w['EventType'] == 'Preempt' else 'deleted'})"
            if went
            else "Canceled"
            if w["Phase"] == "Removed" and w["Outcome"] == "Cancelled"
            else w["Outcome"]
            if w["Phase"] == "Removed"
            else "open"
        )
        verified = VERIFIED.get(f.status, "open")
        check = (
            "no agent record"
            if agent == "no record"
            else "open"
            if verified == "open"
            else "resolved"
            if agent == "Unknown"
            else "agrees"
            if agent == verified or (went and verified == "Completed")
            else "agent missed the end"
            if agent == "open"
            else "disagrees"
        )
        out[(f.event_id, f.vm_name)] = (f.status, verified, check)
    return out
