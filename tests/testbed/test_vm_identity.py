"""Every simulated VM has its own vmId (issue 9: they all had the same one, so simulated
multi-VM data collapsed into one VM in the fleet view)."""

from __future__ import annotations

import uuid

import httpx

from se_forwarder_testbed.simulator import Simulator, parse_scenario

H = {"Metadata": "true"}


def _vm_id(sim: Simulator) -> str:
    with httpx.Client(base_url=sim.url, trust_env=False, timeout=5.0) as c:
        r = c.get("/metadata/instance", params={"api-version": "2021-02-01"}, headers=H)
        assert r.status_code == 200, r.text
        return r.json()["compute"]["vmId"]


def test_each_vm_name_gets_its_own_vm_id_from_the_instance_document():
    ids = {}
    for name in ("web_0", "web_1", "db-0"):
        with Simulator(rate_limit=None, vm_name=name) as s:
            ids[name] = _vm_id(s)
    assert len(set(ids.values())) == 3, ids
    assert all(uuid.UUID(v) for v in ids.values())


def test_the_vm_id_is_deterministic_from_the_name():
    with (
        Simulator(rate_limit=None, vm_name="web_0") as a,
        Simulator(rate_limit=None, vm_name="web_0") as b,
    ):
        assert _vm_id(a) == _vm_id(b)


def test_a_scenario_that_sets_the_vm_id_keeps_it():
    sc = parse_scenario({"vm": {"name": "web_3", "vm_id": "aaaa0000-1111-2222-3333-444455556666"}})
    with Simulator(sc, rate_limit=None) as s:
        assert _vm_id(s) == "aaaa0000-1111-2222-3333-444455556666"
    # the same VM under another name (vm_name override) keeps the id the scenario gave it
    with Simulator(sc, rate_limit=None, vm_name="web_4") as s:
        assert _vm_id(s) == "aaaa0000-1111-2222-3333-444455556666"
