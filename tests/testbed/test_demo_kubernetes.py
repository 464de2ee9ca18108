"""``se-forwarder demo --kubernetes``: an AKS node pool through a Reboot, two nodes one at a
time, a budget holding an eviction back until the replacement is ready, everything uncordoned; the
report on what the agents delivered shows the pool as one service (issue 31)."""

from __future__ import annotations

import io
import json

import pytest

from se_forwarder_testbed.demo.kube import NODES, run_pool

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def test_a_reboot_drains_the_pool_one_node_at_a_time_within_the_budget(tmp_path):
    out = io.StringIO()
    assert run_pool(tmp_path, out, speed=20.0) == 0, out.getvalue()
    text = out.getvalue()
    assert "one node at a time: True; a budget held an eviction back: True" in text
    every = []
    for node in NODES:
        rows = [
            json.loads(x) for x in (tmp_path / f"{node}.records.jsonl").read_text().splitlines()
        ]
        every += rows
        phases = [r["Phase"] for r in rows]
        assert phases == [
            "FirstSeen",
            "NodeCordoned",
            "NodeDrained",
            "Approved",
            "Started",
            "Removed",
            "NodeUncordoned",
        ]
        assert {(r["NodeName"], r["NodePool"]) for r in rows} == {(node, "nodepool1")}
    # the fleet view: both nodes in one service, the pool of their cluster, with both reboots
    ((sub, cluster, pool),) = {(r["SubscriptionId"], r["Cluster"], r["NodePool"]) for r in every}
    service = f"node pool: {sub}/{cluster}/{pool}".lower()
    month = min(r["StartedAt"] for r in every if r["Phase"] == "Started")[:7]
    assert f"  {service}  {month}: 2 VMs, 2 events (2 Reboot), 2 approved early," in text, text
    page = (tmp_path / "fleet-report.html").read_text()
    assert page.split('data-item="services-impact-by-month"', 1)[1].count(service) >= 1
