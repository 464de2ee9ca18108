"""The agent-health workbook's ``VmSlice`` parameter opens on a slice that fits the fleet.

The never-reported merges read every VM of one slice of VmIds (``heartbeat-vms`` and the two
Resource Graph lists); a workbook result is cut at 10,000 rows and Resource Graph pages at 1,000.
The drop-down's choices and its default come from a query (its ``selected`` column): all VMs up
to 800 VMs with a heartbeat, else the first slice of one hex digit, two past 12,800 VMs. The
report opens on the same default (``se_forwarder.report.kql.params``), run through the engine.
"""

from __future__ import annotations

from collections import Counter
from datetime import timedelta

import pytest
from helpers import tinyfleet as tf
from helpers.fleetrun import workbook
from helpers.infra.paths import DASHBOARDS

from se_forwarder.report.workbooks import execute
from se_forwarder.report.workbooks import workbook as plan

pytestmark = pytest.mark.e2e

PARAM = "agent-health/parameters/VmSlice.kql"
HEARTBEAT_VMS = "agent-health/heartbeat-vms.kql"


def _fleet(n: int, *, rg_b: int = 0, old: int = 0) -> tuple[tf.Tiny, set[str]]:
    """``n`` VMs with one heartbeat each in the last 7 days (``rg_b`` of them in "RG-B"), and
    ``old`` more whose only heartbeat is 8 days old (not in the fleet the slices count)."""
    t, ids = tf.Tiny(), set()
    for k in range(n + old):
        v = tf.vm(f"vm-{k}", rg="RG-B" if k < rg_b else "rg-a")
        at = tf.NOW - (timedelta(days=8) if k >= n else timedelta(minutes=1 + k % 600))
        t.beat(v, at, uptime=3600)
        if k < n:
            ids.add(v.VmId.lower())
    return t, ids


def _selected(rows: list[dict]) -> list[str]:
    return [r["value"] for r in rows if r["selected"]]


def _slices(rows: list[dict]) -> dict[str, int]:
    """Each slice's VM count, read from its label ("VmIds starting with 3f (40 VMs)")."""
    return {
        r["value"]: int(r["label"].rsplit("(", 1)[1].split()[0]) for r in rows if r["value"] != "*"
    }


def test_a_small_fleet_opens_on_all_its_vms_in_the_portal_and_the_report():
    t, ids = _fleet(300, old=5)
    e = t.engine()
    rows = workbook(e, PARAM)
    assert list(rows[0]) == ["value", "label", "selected"]  # the portal reads the third column
    assert (
        rows[0]["value"] == "*" and _selected(rows) == ["*"] and rows[0]["label"] == "all VMs (300)"
    )
    assert _slices(rows) == dict(Counter(i[0] for i in ids))
    assert {r["VmId"] for r in workbook(e, HEARTBEAT_VMS)} == ids
    # the report opens the workbook the same way: its hidden heartbeat-vms holds every VM
    wb = plan.load(DASHBOARDS / "agent-health.workbook.json", DASHBOARDS / "queries" / "workbook")
    results = execute.run_workbook(wb, e, None)
    assert {r["VmId"] for r in results["heartbeat-vms"].rows} == ids


def test_past_800_vms_the_first_slice_and_the_filters_count():
    t, ids = _fleet(801, rg_b=1)
    e = t.engine()
    rows = workbook(e, PARAM)
    first = min(i[0] for i in ids)
    assert _selected(rows) == [first] and sum(_slices(rows).values()) == 801
    assert {r["VmId"] for r in workbook(e, HEARTBEAT_VMS)} == {i for i in ids if i[0] == first}
    # the same fleet narrowed to one resource group (any casing) is 800 VMs: all of them
    only_a = {"ResourceGroup": ["RG-A"]}
    assert _selected(workbook(e, PARAM, only_a)) == ["*"]
    assert len(workbook(e, HEARTBEAT_VMS, only_a)) == 800


def test_past_12800_vms_the_slices_are_two_hex_digits_each_under_resource_graphs_page():
    t, ids = _fleet(12_801)
    e = t.engine()
    rows = workbook(e, PARAM)
    slices = _slices(rows)
    assert {len(s) for s in slices} == {2} and sum(slices.values()) == 12_801
    assert max(slices.values()) < 1_000 and _selected(rows) == [min(slices)]
    default = {r["VmId"] for r in workbook(e, HEARTBEAT_VMS)}
    assert default == {i for i in ids if i.startswith(min(slices))}


def test_the_selected_column_is_read_as_javascript_truthiness():
    """The portal's rule: the third column selects a row unless it is 0, false, null or ""."""
    from se_forwarder.report.kql.params import selected_value

    rows = [
        {"v": "a", "l": "A", "s": 0},
        {"v": "b", "l": "B", "s": ""},
        {"v": "c", "l": "C", "s": None},
        {"v": "d", "l": "D", "s": False},
        {"v": "e", "l": "E", "s": 1},
        {"v": "f", "l": "F", "s": "yes"},
    ]
    assert selected_value({"type": 2}, rows) == "e"  # a single select takes the first
    assert selected_value({"type": 2, "multiSelect": True}, rows) == ["e", "f"]
    assert selected_value({"type": 2}, rows[:4]) == ""  # none selected: no value
    assert selected_value({"type": 2}, [{"v": "x", "l": "X"}]) == ""  # no third column
