"""Azure's own record beside ours: the Resource Graph queries (workbook and library) executed in
the engine over hand-made ``maintenanceresources`` rows (tests/helpers/argfleet.py: the fleet's
planned truth, plus VMs with no agent), the agents' side over the fleet's records, and the
workbook's Merge items applied (se_forwarder.report.workbooks.merge); every answer compared with
Python over the same rows."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from helpers import argfleet
from helpers import fleetview as fv
from helpers.fleetrun import library, workbook
from helpers.infra import workbooks
from helpers.infra.paths import DASHBOARDS

from se_forwarder.report.workbooks import argrows, merge

pytestmark = pytest.mark.e2e

AGENT_SPAN = timedelta(days=30)


@pytest.fixture(scope="module")
def platform(fleet, engine):
    rows = argfleet.platform_rows(fleet)
    table, schema = argrows.schema()
    engine.load_table(table, schema, rows)
    return rows


def _key(eid: str, rg: str, vm: str) -> str:
    return f"{eid.lower()}/{rg.lower()}/{vm.lower()}"


def expected_platform(rows) -> dict[str, str]:
    """EventVm -> the platform's status, one per VM an event names."""
    out = {}
    for r in rows:
        for vm in r["properties"]["Resources"]:
            out[_key(r["properties"]["EventId"], r["resourceGroup"], vm)] = r["properties"][
                "EventStatus"
            ]
    return out


def our_status(records) -> dict[str, str]:
    """EventId -> what the agents' records say, event-level (dashboards/README.md rule 3)."""
    out = {}
    for eid, e in fv.events(records).items():
        out[eid] = (
            "Completed"
            if e.started and e.removed
            else "Started"
            if e.started
            else "Canceled"
            if e.cancelled
            else "Unknown"
            if e.removed
            else "Scheduled"
        )
    return out


def _merge(name: str, tables: dict) -> list[dict]:
    wb = workbooks.load(DASHBOARDS / "scheduled-events.workbook.json")
    item = next(it for _, it in workbooks.walk_items(wb["items"]) if it.get("name") == name)
    return merge.apply(item["content"]["query"], tables)


def test_platform_events_one_row_per_event_and_vm(engine, platform):
    rows = workbook(engine, "scheduled-events/platform-events.kql")
    assert {r["EventVm"]: r["PlatformStatus"] for r in rows} == expected_platform(platform)
    assert len(rows) == len(expected_platform(platform))
    lib = library(engine, "resource-graph/platform-events.kql")
    assert {r["EventVm"]: r["PlatformStatus"] for r in lib} == expected_platform(platform)


def test_platform_status_counts(engine, platform):
    exp: dict[tuple, set] = {}
    for r in platform:
        p = r["properties"]
        exp.setdefault((p["EventType"], p["EventStatus"]), set()).add(p["EventId"])
    rows = library(engine, "resource-graph/platform-status-counts.kql")
    assert {(r["EventType"], r["PlatformStatus"]): r["Events"] for r in rows} == {
        k: len(v) for k, v in exp.items()
    }


def test_agent_side_and_the_comparison(engine, fleet, now, platform):
    records = fv.dedupe(fv.visible(fleet.records, now, AGENT_SPAN))
    status = our_status(records)
    ours = {
        _key(r["EventId"], r["ResourceGroup"], r["VmName"]): status[r["EventId"]] for r in records
    }
    agents = workbook(engine, "scheduled-events/agent-events.kql")
    # the workbook's side holds the VMs each event affects (Azure's record names no other; the
    # 10,000-row limit), the library every VM that recorded it
    affected = {
        _key(eid, r["ResourceGroup"], r["VmName"])
        for (eid, _), r in fv.latest(records, "EventId", "VmId").items()
        if r["AffectsThisVm"] is True
    }
    assert {r["EventVm"]: r["OurStatus"] for r in agents} == {
        k: v for k, v in ours.items() if k in affected
    }
    assert len(affected) < len(ours)
    assert workbook(engine, "scheduled-events/agent-events-rows.kql")[0]["Rows"] == len(agents)
    assert {r["EventVm"]: r["OurStatus"] for r in library(engine, "agent-events.kql")} == ours
    tables = {
        "platform-events": workbook(engine, "scheduled-events/platform-events.kql"),
        "agent-events": agents,
    }
    side = {
        f"{r['EventId'].lower()}/{r['ResourceGroup'].lower()}/{r['VmName'].lower()}": (
            r["PlatformStatus"],
            r["OurStatus"],
        )
        for r in _merge("platform-vs-agents", tables)
    }
    plat = expected_platform(platform)
    assert side == {k: (s, ours.get(k)) for k, s in plat.items()}


def test_coverage_gaps_are_platform_events_no_agent_recorded(engine, fleet, now, platform, kinds):
    records = fv.dedupe(fv.visible(fleet.records, now, AGENT_SPAN))
    seen = {_key(r["EventId"], r["ResourceGroup"], r["VmName"]) for r in records}
    plat = expected_platform(platform)
    tables = {
        "platform-events": workbook(engine, "scheduled-events/platform-events.kql"),
        "agent-events": workbook(engine, "scheduled-events/agent-events.kql"),
    }
    gaps = _merge("coverage-gaps", tables)
    got = {_key(r["EventId"], r["ResourceGroup"], r["VmName"]) for r in gaps}
    assert got == set(plat) - seen
    names = {r["VmName"] for r in gaps}
    assert {f"no-agent-vm-{k}" for k in range(3)} <= names  # VMs with no agent at all
    hw = fleet.truth.events[kinds["hardware-failure"][0]]
    assert hw.resources[0] in names  # the VM that died with its host never recorded its event


def test_unknown_outcomes_resolved_by_the_platform(engine, fleet, now, platform, kinds):
    records = fv.dedupe(fv.visible(fleet.records, now, AGENT_SPAN))
    unknown = {e for e, s in our_status(records).items() if s == "Unknown"}
    assert unknown == set(kinds["unknown"])
    rows = workbook(engine, "scheduled-events/unknown-outcomes.kql")
    assert {r["EventId"] for r in rows} == unknown
    tables = {
        "unknown-outcomes": rows,
        "platform-events": workbook(engine, "scheduled-events/platform-events.kql"),
    }
    resolved = _merge("unknown-resolved", tables)
    by_event = {r["properties"]["EventId"]: r["properties"]["EventStatus"] for r in platform}
    assert {(r["EventId"], r["OurOutcome"], r["PlatformStatus"]) for r in resolved} == {
        (e, "Unknown", by_event[e]) for e in unknown
    }
    assert {r["PlatformStatus"] for r in resolved} == {"Canceled"}  # it never ran


def test_the_merges_are_json_the_report_reads(platform):
    wb = workbooks.load(DASHBOARDS / "scheduled-events.workbook.json")
    names = {it.get("name"): it for _, it in workbooks.walk_items(wb["items"])}
    for name, sources in {
        "platform-vs-agents": ["platform-events", "agent-events"],
        "coverage-gaps": ["platform-events", "agent-events"],
        "unknown-resolved": ["unknown-outcomes", "platform-events"],
    }.items():
        content = names[name]["content"]
        assert content["queryType"] == 7
        assert merge.sources(content["query"]) == sources
        assert json.loads(content["query"])["version"] == "Merge/1.0"
