"""A pod restart mid-drain: ``se-forwarder run`` as a process on a Kubernetes node, killed with
SIGKILL while a budget holds an eviction back, then started again on the same state directory
(the hostPath spool): it takes the drain up without a second cordon, and every step has its
record, once."""

from __future__ import annotations

import pytest
from helpers.actions import scenario
from helpers.kube import NODE, cluster, kubernetes_toml, rows

from se_forwarder_testbed.standins.kubernetes import KubernetesApi

pytestmark = [pytest.mark.e2e, pytest.mark.process, pytest.mark.slow]

STEPS = {
    "FirstSeen",
    "NodeCordoned",
    "NodeDrained",
    "Approved",
    "Started",
    "Removed",
    "NodeUncordoned",
}


def test_kill_9_mid_drain_resumes_without_a_second_cordon_or_a_lost_record(
    simulator, agent_process, tmp_path
):
    with KubernetesApi(tmp_path / "kube") as api:
        c = cluster(api)
        sim = simulator(
            scenario(not_before=300.0, remove_after_start=5.0), speed=1.0, first_call_delay=0.0
        )
        extra = kubernetes_toml(api, approve_when_drained=True)
        sink = tmp_path / "records.jsonl"
        agent = agent_process(sim.url, name="agent", file_sink=sink, extra=extra)
        assert agent.wait_for(lambda a: "FailedToEvict" in c.event_reasons(NODE), 60), "".join(
            agent.raw[-30:]
        )
        agent.kill9()  # mid-drain: web-1 evicted, web-2 held back by the budget
        assert c.get_node(NODE)["spec"]["unschedulable"] is True

        again = agent_process(sim.url, name="agent", file_sink=sink, extra=extra)
        assert again.wait_for(lambda a: c.event_reasons(NODE).count("NodeDrainStart") == 2, 60)
        c.ready_replacements()
        eid = sim.event_id(0)
        assert again.wait_for(
            lambda a: c.event_reasons(NODE)[-1:] == ["NoVMEventScheduled"], 120
        ), "".join(again.raw[-30:])
        again.stop()

        mine = [r for r in rows(sink) if r.get("EventId") == eid]
        by_phase: dict[str, set[str]] = {}
        for r in mine:
            by_phase.setdefault(r["Phase"], set()).add(r["RecordId"])
        assert set(by_phase) == STEPS  # none lost
        assert all(len(ids) == 1 for ids in by_phase.values())  # each step recorded once
        assert c.event_reasons(NODE).count("NodeCordonStart") == 1  # no second cordon
        cordons = [
            p for m, p, code in api.requests if m == "PATCH" and p == f"/api/v1/nodes/{NODE}"
        ]
        assert len(cordons) == 2  # the cordon, before the kill, and the uncordon after the event
        node = c.get_node(NODE)
        assert not node["spec"].get("unschedulable")
        assert {p for _, p, code in c.evictions if code == 201} == {"web-1", "web-2"}
