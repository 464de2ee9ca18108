"""What the collector may approve, decided on its own view (``collector/ack_policy.py``, pure):
rows in, inventory in, a ruling out; no I/O, no clock."""

from __future__ import annotations

import json

from helpers.collector import SUB, scheduled, vm_parent

from se_forwarder.collector.ack_config import PreviewAcknowledge
from se_forwarder.collector.ack_policy import View, inventory_vms
from se_forwarder.collector.arm import vm_key
from se_forwarder.collector.eventgrid import parse_body
from se_forwarder.collector.record import InventoryVm
from se_forwarder.timefmt import parse_iso_ms

NOW = parse_iso_ms("2026-03-01T12:00:00Z")
NB = "Sun, 01 Mar 2026 12:15:00 GMT"  # 900 s after NOW


def view(**cfg) -> View:
    return View(PreviewAcknowledge(agents_workspace_id="w", **cfg))


def rows(event_id, status, parent, resources=None, not_before=NB):
    body = scheduled(
        event_id,
        status,
        "2026-03-01T11:00:00Z",
        parent=parent,
        resources=resources,
        not_before=not_before,
    )
    return [r for _, rs in parse_body(json.dumps([body]), NOW).notifications for r in rs]


def vm(name, rg="rg-app", service=None, scale_set=None):
    rid = vm_parent(name, rg)
    return InventoryVm(
        rid, name, tags={"service": service} if service else None, scale_set=scale_set
    )


def test_a_scale_set_event_is_acknowledged_on_the_scale_set_and_names_each_vm():
    v = view()
    parent = vm_parent("x").replace("virtualMachines/x", "virtualMachineScaleSets/Web")
    v.observe(rows("E1", "Scheduled", parent, ["Web_0", "Web_1"]), NOW)
    ev = v.events["E1"]
    assert ev.resource.endswith("/providers/microsoft.compute/virtualmachinescalesets/web")
    assert set(ev.vms) == {vm_key(SUB, "rg-app", "web_0"), vm_key(SUB, "rg-app", "web_1")}
    assert ev.not_before_ms == NOW + 900_000


def test_statuses_only_move_forward():
    v = view()
    v.observe(rows("E1", "Started", vm_parent("a")), NOW)
    v.observe(rows("E1", "Scheduled", vm_parent("a")), NOW + 1)  # an older copy read later
    assert v.events["E1"].status == "Started" and v.events["E1"].started_ms == NOW
    v.observe(rows("E1", "Completed", vm_parent("a")), NOW + 2)
    v.observe(rows("E1", "Started", vm_parent("a")), NOW + 3)
    assert v.events["E1"].status == "Completed"
    assert v.forget(NOW + 4) == ["E1"] and v.events == {}


def test_the_service_is_the_tag_else_the_scale_set_else_the_group():
    vms = inventory_vms([vm("a", service="Batch"), vm("b", scale_set="pool"), vm("c")])
    assert sorted(x.service("service") for x in vms.values()) == [
        "batch",
        f"resource group: {SUB}/rg-app",
        f"scale set: {SUB}/rg-app/pool",
    ]


def test_a_rule_must_select_every_vm_the_event_names():
    v = view(rules=[{"event_types": ["Reboot"], "services": ["batch"]}], max_in_impact=5)
    v.vms = inventory_vms(
        [vm("a", service="batch"), vm("pool_0", service="batch"), vm("pool_1", service="web")]
    )
    v.observe(rows("E1", "Scheduled", vm_parent("a")), NOW)
    assert v.decide(v.events["E1"], frozenset(), NOW).act == "approve"
    pool = vm_parent("x").replace("virtualMachines/x", "virtualMachineScaleSets/pool")
    v.observe(rows("E2", "Scheduled", pool, ["pool_0", "pool_1"]), NOW)
    assert v.decide(v.events["E2"], frozenset(), NOW).act == "none"  # pool_1 is of web
    v.observe(rows("E3", "Scheduled", pool, ["pool_0", "pool_9"]), NOW)
    assert v.decide(v.events["E3"], frozenset(), NOW).why.endswith(
        "not in Resource Graph's inventory"
    )
    agents = frozenset({vm_key(SUB, "rg-app", "pool_0")})
    v.observe(rows("E4", "Scheduled", pool, ["pool_0"]), NOW)
    assert v.decide(v.events["E4"], agents, NOW).reason == "agent"


def test_started_vms_of_the_service_count_agents_included_until_the_bound():
    v = view(rules=[{}], max_in_impact=1, impact_bound_seconds=600)
    v.vms = inventory_vms([vm("a", service="s"), vm("b", service="s")])
    v.observe(rows("E-A", "Started", vm_parent("a")), NOW)  # a VM with an agent, in impact
    v.observe(rows("E-B", "Scheduled", vm_parent("b")), NOW)
    agents = frozenset({vm_key(SUB, "rg-app", "a")})
    ruling = v.decide(v.events["E-B"], agents, NOW + 1000)
    assert (ruling.act, ruling.reason) == ("wait", "limit")
    assert v.decide(v.events["E-B"], agents, NOW + 600_001).act == "approve"  # past the bound
    v.observe(rows("E-A", "Completed", vm_parent("a")), NOW + 2000)
    assert v.decide(v.events["E-B"], agents, NOW + 2000).act == "approve"
