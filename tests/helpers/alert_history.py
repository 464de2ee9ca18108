"""An alert rule's history over a stretch of the fleet's time, checked against the rules
computed in Python (tests/fleet_view/test_alerts*.py)."""

from __future__ import annotations

from datetime import datetime

from helpers import fleetview as fv
from helpers.fleetrun import evaluate_at, moments, rules


def history(engine, fleet, key: str, start: datetime, end: datetime, expected) -> list[set]:
    """The alerts of ``key`` at each evaluation from ``start`` to ``end`` as ``expected`` (records,
    heartbeats, moment -> identities, the rules in Python) computes them; the query is executed
    where that answer changes (the transition points), one evaluation either side, and at both
    ends, and must give the same alerts there. Returns the identities per evaluation."""
    rule = rules()[key]
    times = moments(rule, start, end)
    want = [
        expected(
            fv.visible(fleet.records, t, rule.query_range),
            fv.visible(fleet.heartbeats, t, rule.query_range),
            t,
        )
        for t in times
    ]
    checked = {0, len(times) - 1}
    for i in range(1, len(times)):
        if want[i] != want[i - 1]:
            checked |= {i - 2, i - 1, i, i + 1}
    picked = sorted(k for k in checked if 0 <= k < len(times))
    rows = evaluate_at(engine, key, [times[i] for i in picked])
    for i in picked:
        assert rule.identities(rows[times[i]]) == want[i], f"{key} at {times[i]}"
    return want


def fired(hist: list[set]) -> dict[tuple, int]:
    """How many times each alert started firing (absent, then present)."""
    count: dict[tuple, int] = {}
    before: set = set()
    for now in hist:
        for k in now - before:
            count[k] = count.get(k, 0) + 1
        before = now
    return count
