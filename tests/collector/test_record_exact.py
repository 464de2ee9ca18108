"""The collector's record is exact (issue 28): a VM's name as Azure gives it, one RecordId per fact
whatever the channel, Azure's own time kept over the read time, and the inventory of what exists
(Resource Graph ``resources`` and ``computeresources`` → Inventory and InventoryPass rows)."""

from __future__ import annotations

import json

from helpers.collector import SUB, scheduled, vm_parent

from se_forwarder.collector.eventgrid import parse_body
from se_forwarder.collector.graph import Settling, restatements
from se_forwarder.collector.graphrows import inventory_of, rows_of
from se_forwarder.collector.record import INVENTORY, INVENTORY_PASS, inventory_rows
from se_forwarder.collector.writer import Writer
from se_forwarder.outbox.store import Store


def _eg(event: dict) -> list:
    parsed = parse_body(json.dumps([event]), 0)
    return [r for _, rs in parsed.notifications for r in rs]


def _arg(event: dict) -> list:
    info = event["data"]["resourceInfo"]
    parsed = rows_of(
        "maintenanceresources", [{**info, "type": "microsoft.maintenance/scheduledevents"}], 5
    )
    return [r for _, rs in parsed.notifications for r in rs]


def test_a_vm_name_keeps_the_case_azure_gives_it():
    (r,) = _eg(scheduled("E1", "Scheduled", "2026-01-01T00:00:00Z", parent=vm_parent("Batch-0")))
    assert r.VmName == "Batch-0"
    assert r.VmResourceId == r.VmResourceId.lower() and r.ResourceGroup == "rg-app"


def test_a_started_fact_has_one_record_id_from_either_channel():
    """Event Grid keeps NotBefore filled on a Started event (Microsoft's sample); Resource Graph
    blanks it once started: the same fact, the same RecordId. A re-schedule stays a new fact."""
    eg = scheduled("E1", "Started", "2026-01-01T00:10:00Z")
    eg["data"]["resourceInfo"]["properties"]["NotBefore"] = "Mon, 19 Sep 2025 18:29:47 GMT"
    arg = scheduled("E1", "Started", "2026-01-01T00:10:00Z")  # NotBefore ""
    (a,), (b,) = _eg(eg), _arg(arg)
    assert a.RecordId == b.RecordId
    done = scheduled("e1", "Completed", "2026-01-01T00:20:00Z")  # the id in another casing
    done["data"]["resourceInfo"]["properties"]["NotBefore"] = "Mon, 19 Sep 2025 18:29:47 GMT"
    (c,), (d,) = _eg(done), _arg(scheduled("E1", "Completed", "2026-01-01T00:20:00Z"))
    assert c.RecordId == d.RecordId
    first = _eg(scheduled("E1", "Scheduled", "2026-01-01T00:00:00Z"))[0]
    moved = _eg(
        scheduled(
            "E1", "Scheduled", "2026-01-01T00:01:00Z", not_before="Tue, 20 Sep 2025 18:29:47 GMT"
        )
    )[0]
    assert first.RecordId != moved.RecordId


RG = f"/subscriptions/{SUB}/resourceGroups/RG-Web/providers/Microsoft.Compute"


def _inventory_rows() -> list[dict]:
    return [
        {
            "id": f"{RG}/virtualMachines/Api-0",
            "name": "Api-0",
            "type": "microsoft.compute/virtualmachines",
            "subscriptionId": SUB,
            "zones": ["2"],
            "tags": {"service": "api", "team": "shop"},
            "properties": {
                "vmId": "11111111-2222-3333-4444-555555555555",
                "extended": {"instanceView": {"powerState": {"code": "PowerState/deallocated"}}},
            },
        },
        {  # a Flexible instance: a VM whose properties name its scale set
            "id": f"{RG}/virtualMachines/flex_ab12cd",
            "name": "flex_ab12cd",
            "type": "Microsoft.Compute/virtualMachines",
            "subscriptionId": SUB,
            "properties": {"virtualMachineScaleSet": {"id": f"{RG}/virtualMachineScaleSets/Flex"}},
        },
        {  # a Uniform instance (computeresources)
            "id": f"{RG}/virtualMachineScaleSets/Web/virtualMachines/3",
            "name": "Web_3",
            "type": "microsoft.compute/virtualmachinescalesets/virtualmachines",
            "subscriptionId": SUB,
            "properties": {"vmId": "abc", "instanceView": {"platformFaultDomain": 1}},
        },
        {"id": "/nope", "name": "x", "type": "microsoft.compute/virtualmachines"},
        {"id": f"{RG}/disks/d1", "type": "microsoft.compute/disks"},
    ]


def test_the_inventory_lists_every_kind_of_vm_with_its_tags_and_names_as_given():
    by_sub, problems = inventory_of(_inventory_rows())
    assert len(problems) == 1 and "/nope" in problems[0]  # unreadable: one line, skipped
    vms = {v.name: v for v in by_sub[SUB.lower()]}
    assert set(vms) == {"Api-0", "flex_ab12cd", "Web_3"}
    assert vms["Api-0"].tags == {"service": "api", "team": "shop"} and vms["Api-0"].zone == "2"
    assert vms["Api-0"].power_state == "PowerState/deallocated"
    assert vms["flex_ab12cd"].scale_set == "flex"
    rows = inventory_rows(SUB, list(vms.values()), 1_780_000_000_000, "t")
    assert [r.RecordType for r in rows] == [INVENTORY] * 3 + [INVENTORY_PASS]  # the pass last
    by = {r.VmName: r for r in rows if r.RecordType == INVENTORY}
    assert by["Web_3"].ScaleSetName == "web" and by["Web_3"].VmResourceId.endswith(
        "/virtualmachinescalesets/web/virtualmachines/3"
    )
    assert by["flex_ab12cd"].ScaleSetName == "flex"
    assert by["Api-0"].ResourceGroup == "rg-web" and by["Api-0"].Tags["service"] == "api"
    assert rows[-1].SubscriptionId == SUB.lower() and rows[-1].DurationInSeconds == 3
    again = inventory_rows(SUB, list(vms.values()), 1_780_000_000_000, "t")
    later = inventory_rows(SUB, list(vms.values()), 1_780_003_600_000, "t")
    assert [r.RecordId for r in again] == [r.RecordId for r in rows]  # a pass read twice: one fact
    assert not {r.RecordId for r in later} & {r.RecordId for r in rows}  # each pass its own


def test_resource_graph_statuses_settle_behind_event_grid(tmp_path):
    """Beside the Event Hub, a status read from Resource Graph waits: Event Grid's copy (Azure's
    own time) is committed first and the Resource Graph copy is then its duplicate; what Event
    Grid never delivers is written once the wait is over."""
    store = Store(tmp_path / "state")
    store.register_sinks(["la"])
    writer = Writer(store, 1000)
    settling = Settling(900_000)
    t0 = 1_767_225_600_000
    late = _arg(scheduled("E1", "Started", "2026-01-01T00:10:00Z"))  # read after a downtime
    alone = _arg(scheduled("E2", "Completed", "2026-01-01T00:10:00Z"))  # Event Grid lost it
    assert writer.write(settling.take([(None, late + alone)], t0)) == 0
    assert len(settling.held) == 2
    eg = _eg(scheduled("E1", "Started", "2026-01-01T00:03:00Z"))  # the backlog: Azure's time
    assert writer.write([("grid-1", eg)]) == 1
    assert writer.write(settling.take([], t0 + 899_000)) == 0  # still waiting
    assert writer.write(settling.take([], t0 + 900_000)) == 1  # only E2: E1 is a duplicate
    rows = [json.loads(r.payload) for r in store.fetch("la", 100)]
    times = {r["EventId"]: r["TimeGenerated"] for r in rows}
    assert times == {"E1": "2026-01-01T00:03:00.000Z", "E2": alone[0].TimeGenerated}
    assert not settling.held and writer.counters.duplicate_records == 1
    store.close()


def test_without_a_settle_time_or_when_flushed_nothing_waits():
    rows = _arg(scheduled("E1", "Started", "2026-01-01T00:10:00Z"))
    assert Settling(0).take([(None, rows)], 0) == [(None, rows)]
    held = Settling(900_000)
    assert held.take([(None, rows)], 0) == []
    assert held.take([], 1, flush=True) == [(None, rows)]


def test_a_still_scheduled_event_is_stated_again_once_a_day(tmp_path):
    """Announced 3 days ahead: Resource Graph reads it every pass, the writer keeps one row per
    day (its own RecordId), so a log alert's 2-day range always holds it; nothing on the first."""
    store = Store(tmp_path / "state")
    store.register_sinks(["la"])
    writer = Writer(store, 1000)
    day = 86_400_000
    t0 = 1_767_225_600_000 + 3_600_000
    first = [(None, _arg(scheduled("E1", "Scheduled", "2026-01-01T01:00:00Z")))]
    assert writer.write(first + restatements(first, writer.committed, t0)) == 1
    for t in (t0 + 300_000, t0 + day, t0 + day + 300_000, t0 + 2 * day):
        again = [(None, _arg(scheduled("E1", "Scheduled", "2026-01-01T01:00:00Z")))]
        writer.write(again + restatements(again, writer.committed, t))
    rows = [json.loads(r.payload) for r in store.fetch("la", 100)]
    # the first read (its read time), then once a day whatever the number of passes
    assert [r["TimeGenerated"][:10] for r in rows[1:]] == ["2026-01-01", "2026-01-02", "2026-01-03"]
    assert len({r["RecordId"] for r in rows}) == 4 and {r["EventStatus"] for r in rows} == {
        "Scheduled"
    }
    assert {r["Channel"] for r in rows} == {"resource-graph"}
    store.close()
