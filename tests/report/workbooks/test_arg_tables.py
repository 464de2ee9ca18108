"""The report's ``--arg-file`` holds what several ``az graph query`` runs print: scheduled
events, VMs and uniform scale-set instances, each loaded into the table Resource Graph keeps it
in, so the agent-health workbook's never-reported merges run offline too."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import pytest
from helpers import tinyfleet as tf
from helpers.infra.paths import DASHBOARDS

from se_forwarder.report.workbooks import argrows, execute, merge
from se_forwarder.report.workbooks import workbook as plan

pytestmark = pytest.mark.e2e


def _arm(v, kind: str) -> dict:
    """A Resource Graph row for VM ``v``: ``vm`` (resources) or ``instance`` (computeresources)."""
    row = {
        "id": v.VmResourceId,
        "name": v.VmName,
        "location": v.Location,
        "resourceGroup": v.ResourceGroup.upper(),
        "subscriptionId": v.SubscriptionId,
    }
    if kind == "vm":
        return row | {
            "type": "Microsoft.Compute/virtualMachines",
            "properties": {
                "vmId": v.VmId.upper(),
                "extended": {"instanceView": {"powerState": {"code": "PowerState/running"}}},
            },
        }
    return row | {
        "type": "microsoft.compute/virtualmachinescalesets/virtualmachines",
        "properties": {"vmId": v.VmId, "osProfile": {"computerName": v.VmName}},
    }


def agent_health(*names: str) -> plan.Workbook:
    """The agent-health workbook with only the items ``names`` and the items their merges read
    (transitively): the others' queries are other tests' business and cost seconds each."""
    wb = plan.load(DASHBOARDS / "agent-health.workbook.json", DASHBOARDS / "queries" / "workbook")
    want, todo = set(), list(names)
    while todo:
        name = todo.pop()
        if name not in want:
            want.add(name)
            item = wb.hidden[name]
            todo += merge.sources(item.text) if item.kind == "merge" else []
    return dataclasses.replace(wb, hidden={k: v for k, v in wb.hidden.items() if k in want})


def test_rows_go_to_the_table_of_their_type():
    event = {"type": "microsoft.maintenance/scheduledevents", "properties": {}}
    vm, inst = (
        {"type": "Microsoft.Compute/virtualMachines"},
        {"type": "microsoft.compute/virtualmachinescalesets/virtualmachines"},
    )
    assert argrows.by_table([event, vm, inst, vm]) == {
        "maintenanceresources": [event],
        "resources": [vm, vm],
        "computeresources": [inst],
    }
    # a file of VMs only still holds an (empty) maintenanceresources table
    assert argrows.by_table([vm]) == {"maintenanceresources": [], "resources": [vm]}


def test_the_tables_a_query_reads_not_its_properties_or_comments():
    q = (
        "// reads computeresources? no: this is a comment\nresources\n| where type =~ 'x'\n"
        "| join (maintenanceresources | project r = properties.Resources) on id"
    )
    assert argrows.tables_read(q) == {"resources", "maintenanceresources"}


def test_vms_and_instances_in_the_file_feed_the_never_reported_merges():
    t = tf.Tiny()
    reporting, silent = tf.vm("web-1"), tf.vm("web-2")
    inst_reporting, inst_silent = tf.vm("ss_0", scale_set="ss"), tf.vm("ss_1", scale_set="ss")
    for v in (reporting, inst_reporting):
        t.beat(v, tf.NOW - timedelta(minutes=3), uptime=3600)
    e = t.engine()
    rows = [
        _arm(reporting, "vm"),
        _arm(silent, "vm"),
        _arm(inst_reporting, "instance"),
        _arm(inst_silent, "instance"),
    ]
    by_table = argrows.by_table(rows)
    _, schema = argrows.schema()
    for table, table_rows in by_table.items():
        e.load_table(table, schema, table_rows)
    wb = agent_health("never-reported", "never-reported-scale-set-vms")
    results = execute.run_workbook(wb, e, sorted(by_table))
    never = results["never-reported"]
    assert never.error is None and [r["VmName"] for r in never.rows] == ["web-2"]
    never_ss = results["never-reported-scale-set-vms"]
    assert never_ss.error is None and [r["VmName"] for r in never_ss.rows] == ["ss_1"]


def test_a_table_the_file_does_not_hold_is_absent_by_design_not_an_error():
    """A file with no resources rows (a fleet where it was not queried): the panel says what the
    view cannot know, not a failure (issue 28: a small fleet without scale sets showed a red
    "No result" for computeresources, a file the demo itself wrote)."""
    t = tf.Tiny()
    t.beat(tf.vm("web-1"), tf.NOW - timedelta(minutes=3), uptime=3600)
    e = t.engine()
    _, schema = argrows.schema()
    e.load_table("maintenanceresources", schema, [])
    results = execute.run_workbook(agent_health("arg-vms"), e, ["maintenanceresources"])
    got = results["arg-vms"]
    assert got.error is None and got.rows == [] and not got.needs_arg
    assert got.absent is not None and "no resources rows" in got.absent
    assert "cannot know" in got.absent
