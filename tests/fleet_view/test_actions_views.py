"""The policy's views, executed (issue 10): "approved early" and "hook failures", each on a small
dataset built with the project's own tracker and heartbeats, against numbers worked out here."""

from __future__ import annotations

import math
from datetime import timedelta

from helpers.fleetrun import grain, workbook
from helpers.tinyfleet import NOW, Tiny, event, vm

MIN = timedelta(minutes=1)


def nearest_rank(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]


HOUR = timedelta(hours=1)


def test_approved_early_one_row_per_event_with_its_latest_facts_and_who_approved():
    t, a, b = Tiny(), vm("a"), vm("b")
    t0 = NOW - 3 * HOUR
    nb = t0 + 15 * MIN
    both = ("a", "b")
    # E1: announced as a Freeze, updated to a User Reboot, approved by a, started 13 min early
    for who in (a, b):
        t.poll(who, t0, [event("E1", "Freeze", "Scheduled", both, nb, 5)], incarnation=2)
        t.poll(
            who, t0 + MIN, [event("E1", "Reboot", "Scheduled", both, nb, -1, "User")], incarnation=3
        )
    t.approve(a, t0 + MIN + timedelta(seconds=30), "E1")
    for who, late in ((a, 0), (b, 60)):
        rows = t.poll(
            who,
            t0 + 2 * MIN + timedelta(seconds=late),
            [event("E1", "Reboot", "Started", both, None, -1, "User")],
            incarnation=4,
        )
        if who is a:
            t.redeliver(rows[0], HOUR)  # an at-least-once copy, an hour later
    # E2: started at its NotBefore: not early
    t.poll(
        a,
        t0 + 20 * MIN,
        [event("E2", "Redeploy", "Scheduled", ("a",), t0 + 30 * MIN)],
        incarnation=5,
    )
    t.poll(a, t0 + 31 * MIN, [event("E2", "Redeploy", "Started", ("a",), None)], incarnation=6)
    # E3: started 5 minutes early on b, approved by something else
    t.poll(
        b, t0 + 40 * MIN, [event("E3", "Reboot", "Scheduled", ("b",), t0 + 50 * MIN)], incarnation=7
    )
    t.poll(b, t0 + 45 * MIN, [event("E3", "Reboot", "Started", ("b",), None)], incarnation=8)
    # E4: a user's reboot Azure approved itself (automaticallyApprove): never Scheduled
    t.poll(a, t0 + 60 * MIN, [], incarnation=9)
    t.poll(
        a,
        t0 + 60 * MIN + timedelta(seconds=1),
        [event("E4", "Reboot", "Started", ("a",), None, -1, "User")],
        incarnation=10,
    )
    # E5: a hardware failure (never Scheduled, from Platform): nobody approved it, not listed
    t.poll(
        b,
        t0 + 60 * MIN + timedelta(seconds=1),
        [event("E5", "Reboot", "Started", ("b",), None)],
        incarnation=11,
    )
    rows = {
        r["EventId"]: r
        for r in workbook(t.engine(), "scheduled-events/approved-early.kql", grain("1h", days=1))
    }
    assert set(rows) == {"E1", "E3", "E4"}
    assert rows["E1"]["StartedBy"] == "our agents"
    assert rows["E3"]["StartedBy"].startswith("not our agents")
    e4 = rows["E4"]
    assert e4["StartedBy"] == "Azure's own policy (automaticallyApprove)"
    assert (e4["VmsStartedEarly"], e4["MedianEarlySeconds"], e4["EventSource"]) == (1, None, "User")
    assert not e4["ApprovedBy"]
    e1 = rows["E1"]
    assert (e1["EventType"], e1["EventSource"], e1["DurationInSeconds"]) == ("Reboot", "User", -1)
    assert e1["VmsStartedEarly"] == 2
    # a started 13 min early, b 12 min: Kusto's percentile() is nearest-rank (no interpolation)
    assert e1["MedianEarlySeconds"] == -nearest_rank([-13 * 60, -12 * 60], 50)
    assert list(e1["ApprovedBy"]) == ["a"]
    assert rows["E3"]["VmsStartedEarly"] == 1 and rows["E3"]["MedianEarlySeconds"] == 300
    assert not rows["E3"]["ApprovedBy"]


def test_hook_failures_sum_increases_across_agent_runs_per_vm():
    t, a, b, old = Tiny(), vm("a"), vm("b"), vm("old")
    run1 = NOW - 5 * HOUR
    t.beat(a, run1, "start", uptime=0.5)
    t.beat(a, run1 + 5 * MIN, uptime=300.5, hooks_failed=2, hooks_ok=1, approvals_sent=1)
    t.beat(
        a,
        run1 + 10 * MIN,
        uptime=600.5,
        hooks_failed=3,
        hooks_ok=1,
        approvals_sent=1,
        approvals_failed=1,
    )
    run2 = run1 + 20 * MIN  # a crash, a new run: its counters start at 0
    t.beat(a, run2, "start", uptime=0.5)
    t.beat(a, run2 + 5 * MIN, uptime=300.5, hooks_failed=1, hooks_ok=4, approvals_sent=2)
    t.beats(b, run1, run1 + HOUR, first="start", hooks_ok=3, approvals_sent=3)  # all went well
    old_row = t.beat(old, run1, "start", uptime=0.5)
    for col in ("HooksFailed", "HooksSucceeded", "ApprovalsFailed", "ApprovalsSent"):
        old_row[col] = None  # an agent from before hooks: the columns are empty
    rows = workbook(t.engine(), "agent-health/hook-failures.kql", grain("1h", days=1))
    assert [r["VmName"] for r in rows] == ["a"]
    [r] = rows
    assert (r["HookFailures"], r["HooksSucceeded"], r["ApprovalsGivenUp"], r["ApprovalsSent"]) == (
        3 + 1,
        1 + 4,
        1,
        1 + 2,
    )
