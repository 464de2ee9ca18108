"""What a rule returns under its cap (dashboards/definitions/alert-cap.kql), computed in Python
from its rows without the cap: the most urgent ``max_alerts - 1`` rows as they are, and one row
for the rest with fixed dimension values, their number (More), up to 20 of their names (MoreOf)
and their measures folded."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from se_forwarder.report import Engine

from .fleetrun import evaluate, rules

WORKSPACE = (
    "/subscriptions/00000000-0000-0000-0000-000000000000/resourceGroups/rg-obs"
    "/providers/Microsoft.OperationalInsights/workspaces/se-forwarder"
)


def _not_before(r: dict) -> tuple[bool, str]:
    return (r["NotBefore"] == "unknown", r["NotBefore"])


@dataclass(frozen=True)
class Cap:
    urgency: Callable[[dict], Any]  # sorts the most urgent first
    dims: dict[str, str]  # the row beyond the cap: its dimension values
    named: str  # the column MoreOf names the folded rows by
    folded: dict[str, Callable[[list], Any]]  # measure columns: how the rest's values fold


EVENTS = {"EventId": "(more events)", "EventType": "(several)"}
VMS = {"VmResourceId": WORKSPACE}
CAPS = {
    "impactful-event-unwatched": Cap(
        lambda r: (*_not_before(r), r["EventId"], r["EventType"]),
        EVENTS,
        "EventId",
        {"VmsUnwatched": sum, "NoAgent": sum, "NotBefore": min},
    ),
    "impactful-events-fleet": Cap(
        lambda r: (*_not_before(r), r["EventId"], r["EventType"]),
        EVENTS,
        "EventId",
        {"VmsHit": sum, "NotBefore": min},
    ),
    "service-concurrency-risk": Cap(
        lambda r: (-r["VmsAtOnce"], r["Service"]),
        {"Service": "(more services)"},
        "Service",
        {"VmsAtOnce": max, "ServiceVms": sum, "PercentAtOnce": max, "At": min},
    ),
    "impactful-event-scheduled": Cap(
        lambda r: (*_not_before(r), r["VmResourceId"], r["EventId"]),
        {**VMS, "EventId": "(more VMs)", "EventType": "(several)", "NotBefore": "(several)"},
        "VmName",
        {},
    ),
    "agent-silent": Cap(
        lambda r: (r["LastHeartbeat"], r["VmResourceId"]),
        {**VMS, "LastHeartbeat": "(several)"},
        "VmName",
        {},
    ),
    "started-without-notice": Cap(
        lambda r: (r["SeenAt"], r["VmResourceId"], r["EventId"]),
        {**VMS, "EventId": "(more VMs)", "EventType": "(several)"},
        "VmName",
        {"SeenAt": min},
    ),
    "delivery-trouble": Cap(
        lambda r: r["VmResourceId"],
        VMS,
        "VmName",
        {"SpoolDepth": sum, "NewFailures": sum, "NewDropped": sum, "NewDeadLettered": sum},
    ),
}


def _key(r: dict) -> tuple:
    return tuple(sorted((k, str(v)) for k, v in r.items()))


def check(engine: Engine, key: str, t: datetime, *, at_n: bool = True) -> int:
    """The rule at ``t`` under a cap of 2 alerts and (``at_n``) of n, its rows without a cap (at
    least 3), against the Python oracle; returns n."""
    cap = CAPS[key]
    full = evaluate(engine, key, t, workspace=WORKSPACE)
    n = len(full)
    assert n >= 3, f"{key}: {n} rows at {t}: too few to cap"
    assert all(r["More"] == 0 and r["MoreOf"] == "" for r in full)
    for k in (2, n) if at_n else (2,):
        got = evaluate(engine, key, t, max_alerts=k, workspace=WORKSPACE)
        assert len(rules()[key].identities(got)) <= k
        if n <= k:
            assert sorted(map(_key, got)) == sorted(map(_key, full)), (key, k)
            continue
        order = sorted(full, key=cap.urgency)
        kept, rest = order[: k - 1], order[k - 1 :]
        over = [r for r in got if r["More"]]
        assert len(got) == k and len(over) == 1, (key, k, got)
        assert sorted(_key(r) for r in got if not r["More"]) == sorted(map(_key, kept)), (key, k)
        row = over[0]
        assert {d: row[d] for d in cap.dims} == cap.dims
        assert row["More"] == len(rest)
        names = row["MoreOf"].split(", ")
        assert len(names) == min(len(rest), 20) and set(names) <= {r[cap.named] for r in rest}
        for col, fold in cap.folded.items():
            assert row[col] == fold([r[col] for r in rest]), (key, k, col)
    return n
