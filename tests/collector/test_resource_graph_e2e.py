"""``se-forwarder collect --resource-graph --once`` through the real azure-mgmt-resourcegraph
client against the Resource Graph stand-in: every page read, the quota honoured, rows in the
platform table; a second pass writes nothing new."""

from __future__ import annotations

import pytest
from helpers.collector import CollectorWorld, annotation, scheduled, vm_parent

from se_forwarder_testbed.standins.resource_graph import ResourceGraphStandIn
from se_forwarder_testbed.standins.tls import generate

pytestmark = [pytest.mark.e2e, pytest.mark.tls]


def test_resource_graph_pass_pages_throttles_and_dedupes(tmp_path):
    with (
        CollectorWorld(tmp_path) as world,
        ResourceGraphStandIn(
            generate(tmp_path / "tls-arg"), world.authority, quota=2, window=2.0
        ) as arg,
    ):
        events = []
        for i in range(1100):  # more than one page of 1000
            info = scheduled(
                f"G{i:04d}",
                "Completed",
                "2026-01-01T00:00:00Z",
                parent=vm_parent(f"no-agent-{i % 40}"),
            )["data"]["resourceInfo"]
            events.append({**info, "type": "microsoft.maintenance/scheduledevents"})
        arg.tables["maintenanceresources"] = events
        ann = annotation("VirtualMachineHostCrashed", "no-agent-1", "2026-01-01T00:00:00Z")
        arg.tables["healthresources"] = [
            {**ann["data"]["resourceInfo"], "type": "microsoft.resourcehealth/resourceannotations"}
        ]
        arg.tables["resources"] = [  # what exists: one VM with no agent
            {
                "id": vm_parent("No-Agent-1"),
                "name": "No-Agent-1",
                "type": "microsoft.compute/virtualmachines",
                "subscriptionId": vm_parent("x").split("/")[2],
                "tags": {"service": "batch"},
                "properties": {"vmId": "0f0e0d0c-0000-4000-8000-000000000001"},
            }
        ]
        config = world.collector_config(
            tmp_path / "c",
            resource_graph_endpoint=arg.endpoint,
            resource_graph_ca_file=str(arg.tls.ca_cert),
        )
        for _ in range(2):
            proc = world.start_collector(config, "--resource-graph", "--once")
            assert proc.wait(120) == 0, (tmp_path / "c.log").read_text()[-2000:]
        everything = world.platform_rows()
        rows = [r for r in everything if r["RecordType"] in ("ScheduledEvent", "Annotation")]
        assert len(rows) == 1101 and len({r["RecordId"] for r in rows}) == 1101
        assert {r["Channel"] for r in everything} == {"resource-graph"}
        # the inventory, each pass: the VM (its name as Azure gives it, its tags), then the pass
        listed = [r for r in everything if r["RecordType"] == "Inventory"]
        passes = [r for r in everything if r["RecordType"] == "InventoryPass"]
        assert [r["VmName"] for r in listed] == ["No-Agent-1"] * 2 and len(passes) == 2
        assert listed[0]["Tags"] == {"service": "batch"} and passes[0]["DurationInSeconds"] == 1
        # 2 pages + 1 per pass and table, and the two inventory tables, twice
        assert len(arg.requests) == 10
        assert arg.requests[1]["options"]["$skipToken"]
        assert arg.throttled == 0  # the quota headers were honoured before a 429 was needed
