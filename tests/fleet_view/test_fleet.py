"""The generated fleet has what the fleet-view tests need, built deterministically."""

from __future__ import annotations

from collections import Counter

import pytest
from helpers import fleetview as fv

from se_forwarder_testbed.fleet import FleetSpec, generate

pytestmark = pytest.mark.e2e


def test_the_fleet_covers_the_scenario(fleet):
    recs, beats = fleet.records, fleet.heartbeats
    ids = {b["VmId"] for b in beats}
    assert len(ids) >= 50 and len({b["VmName"] for b in beats}) == len(ids)
    assert {b["Zone"] for b in beats} >= {None, "1", "2", "3"}
    assert (
        len({b["FaultDomain"] for b in beats}) >= 3 and len({b["UpdateDomain"] for b in beats}) == 5
    )
    assert len({b["ScaleSetName"] for b in beats} - {None}) == 2
    span = max(fv.at(b) for b in beats) - min(fv.at(b) for b in beats)
    assert span.days >= 7
    assert {r["EventType"] for r in recs} == {
        "Freeze",
        "Reboot",
        "Redeploy",
        "Preempt",
        "Terminate",
    }
    assert {r["Outcome"] for r in recs if r["Phase"] == "Removed"} == {
        "Completed",
        "Cancelled",
        "Unknown",
    }
    assert any(r["Phase"] == "Approved" for r in recs)
    assert any((r["StartDelaySeconds"] or 0) < 0 for r in recs)
    updated = [r for r in recs if r["Phase"] == "Updated"]
    first = {(r["EventId"], r["VmId"]): r for r in recs if r["Phase"] == "FirstSeen"}
    changes = {
        (
            first[(u["EventId"], u["VmId"])]["EventType"],
            u["EventType"],
            len(u["Resources"]) - len(first[(u["EventId"], u["VmId"])]["Resources"]),
        )
        for u in updated
    }
    assert ("Freeze", "Reboot", 1) in changes and ("Reboot", "Reboot", -1) in changes
    assert any(
        u["DurationInSeconds"] != first[(u["EventId"], u["VmId"])]["DurationInSeconds"]
        for u in updated
    )
    sibling = [
        r
        for r in recs
        if r["Phase"] == "FirstSeen"
        and r["EventStatus"] == "Started"
        and r["AffectsThisVm"] is False
    ]
    assert sibling
    assert max((fv.ts(r["NotBefore"]) - fv.at(r)).days for r in recs if r["NotBefore"]) >= 3
    copies = Counter(r["RecordId"] for r in recs + beats)
    assert sum(1 for n in copies.values() if n > 1) > 100  # at-least-once
    assert {b["AgentVersion"] for b in beats} == {"0.1.0", "0.2.0"}
    assert max(b["PollErrors"] for b in beats) > 0 and max(b["FailedDeliveries"] for b in beats) > 0
    assert max(b["DroppedRecords"] for b in beats) > 0
    fates = Counter(v.fate for v in fleet.truth.vms.values())
    assert {"evicted-and-back-silent", "deleted", "stopped-silent", "crash-loop-silent"} <= set(
        fates
    )


def test_generation_is_deterministic():
    spec = FleetSpec(days=2, seed=3)
    a, b = generate(spec), generate(spec)
    assert a.records == b.records and a.heartbeats == b.heartbeats
    assert generate(FleetSpec(days=2, seed=4)).heartbeats != a.heartbeats


def test_a_larger_fleet_repeats_the_cell_with_distinct_identities():
    f = generate(FleetSpec(vms=104, days=1))
    assert len({b["VmId"] for b in f.heartbeats}) == 104
    assert len({b["VmName"] for b in f.heartbeats}) == 104
