"""The agent on a Kubernetes node, in this process on the FakeClock, against the IMDS simulator
(which honours approvals) and the Kubernetes API stand-in (which enforces budgets, the cordon's
taint and resourceVersion conflicts): a Reboot drained by policy without breaking the budget,
approved early, uncordoned only when this agent cordoned it, with Kubernetes events and a record
for each step. A kill -9 mid-drain: test_node_drain_restart.py."""

from __future__ import annotations

import pytest
from helpers.actions import scenario
from helpers.kube import NODE, cluster, kubernetes_toml, node_phases, rows

from se_forwarder_testbed.standins.kubernetes import KubernetesApi

pytestmark = pytest.mark.e2e  # the simulator and the stand-in over loopback

STEPS = [
    "FirstSeen",
    "NodeCordoned",
    "NodeDrained",
    "Approved",
    "Started",
    "Removed",
    "NodeUncordoned",
]


@pytest.fixture
def api(tmp_path):
    with KubernetesApi(tmp_path / "kube") as api:
        yield api


def start(simulator, agent_run, clock, tmp_path, api, *, sc=None, **rule):
    sim = simulator(sc or scenario(not_before=600.0), speed=1.0, first_call_delay=0.0, clock=clock)
    agent = agent_run(
        sim.url,
        file_sink=tmp_path / "records.jsonl",
        extra=f'heartbeat_path = "{tmp_path / "heartbeats.jsonl"}"\n'
        + kubernetes_toml(api, **rule),
    )
    return sim, agent


def evictions(c, name):
    return [code for _, pod, code in c.evictions if pod == name]


def test_a_reboot_is_drained_within_the_budget_approved_early_and_uncordoned(
    simulator, agent_run, clock, tmp_path, api
):
    c = cluster(api)
    sim, agent = start(
        simulator,
        agent_run,
        clock,
        tmp_path,
        api,
        approve_when_drained=True,
        exclude_from_load_balancers=True,
    )
    eid = sim.event_id(0)
    # web-1 goes (3 healthy, 2 needed); web-2 is refused while web-1's replacement is not ready
    assert agent.wait_for(lambda a: 429 in evictions(c, "web-2"), 120)
    node = c.get_node(NODE)
    assert node["spec"]["unschedulable"] is True
    assert (
        node["metadata"]["labels"]["node.kubernetes.io/exclude-from-external-load-balancers"]
        == "true"
    )
    assert [x["type"] for x in node["status"]["conditions"]] == ["Ready", "ScheduledEvent"]
    assert node_phases(tmp_path / "records.jsonl", eid)[:2] == ["FirstSeen", "NodeCordoned"]
    assert agent.wait_for(lambda a: len(evictions(c, "web-2")) >= 2, 120)  # retried, backing off
    assert "NodeDrained" not in node_phases(tmp_path / "records.jsonl", eid)
    c.ready_replacements()  # the replacement is ready: the budget allows one more
    assert agent.wait_for(
        lambda a: "NodeUncordoned" in node_phases(tmp_path / "records.jsonl", eid), 300
    )

    assert node_phases(tmp_path / "records.jsonl", eid) == STEPS
    started = next(r for r in rows(tmp_path / "records.jsonl") if r["Phase"] == "Started")
    assert started["StartDelaySeconds"] < -60  # approved early: it started long before NotBefore
    assert evictions(c, "web-1") == [201] and evictions(c, "web-2")[-1] == 201
    assert set(evictions(c, "web-2")[:-1]) == {429}  # never past the budget
    assert {p for _, p, _ in c.evictions} == {"web-1", "web-2"}  # no DaemonSet or mirror pod
    assert not any(m == "DELETE" for m, _, _ in api.requests)  # only through the Eviction API
    node = c.get_node(NODE)
    assert not node["spec"].get("unschedulable") and "taints" not in node["spec"]
    assert (
        "node.kubernetes.io/exclude-from-external-load-balancers" not in node["metadata"]["labels"]
    )
    assert not any(k.startswith("se-forwarder.io/") for k in node["metadata"]["annotations"])
    assert [x["status"] for x in node["status"]["conditions"]] == ["True", "False"]
    assert c.event_reasons(NODE) == [
        "VMEventScheduled",
        "NodeCordonStart",
        "NodeCordonEnd",
        "NodeDrainStart",
        "Evicted",  # web-1
        "FailedToEvict",  # web-2: told once, retried quietly with backoff
        "Evicted",  # web-2, once the replacement was ready
        "NodeDrainEnd",
        "ScheduledEventApproved",
        "NodeUncordonStart",
        "NodeUncordonEnd",
        "NoVMEventScheduled",
    ]
    drained = next(r for r in rows(tmp_path / "records.jsonl") if r["Phase"] == "NodeDrained")
    assert drained["NodeDetail"].startswith("2 pod(s) evicted")
    for r in rows(tmp_path / "records.jsonl"):
        assert (r["NodeName"], r["NodePool"], r["Cluster"]) == (
            NODE,
            "nodepool1",
            "MC_rg_aks1_westeurope",
        )
    counted = agent.agent.recorder.stats.records  # what the records metric is made of
    assert counted[("NodeDrained", "Reboot")] == counted[("NodeUncordoned", "Reboot")] == 1
    agent.stop()
    beats = rows(tmp_path / "heartbeats.jsonl")
    assert beats and all(b["NodeName"] == NODE and b["NodePool"] == "nodepool1" for b in beats)


def test_a_node_cordoned_by_aks_is_left_cordoned_and_recorded(
    simulator, agent_run, clock, tmp_path, api
):
    c = cluster(api)
    c.patch_node(
        NODE,
        {
            "spec": {
                "unschedulable": True,
                "taints": [
                    {"key": "remediator.kubernetes.azure.com/unschedulable", "effect": "NoSchedule"}
                ],
            }
        },
        strategic=False,
        status=False,
    )
    c.replacements_ready = True
    sim, agent = start(simulator, agent_run, clock, tmp_path, api, approve_when_drained=True)
    eid = sim.event_id(0)
    assert agent.wait_for(lambda a: "Removed" in node_phases(tmp_path / "records.jsonl", eid), 300)
    agent.wait_for(lambda a: "NoVMEventScheduled" in c.event_reasons(NODE), 30)
    assert node_phases(tmp_path / "records.jsonl", eid) == [
        "FirstSeen",
        "NodeCordonSkipped",
        "NodeDrained",
        "Approved",
        "Started",
        "Removed",
    ]
    skipped = next(r for r in rows(tmp_path / "records.jsonl") if r["Phase"] == "NodeCordonSkipped")
    assert "AKS's remediator" in skipped["NodeDetail"]
    assert c.get_node(NODE)["spec"]["unschedulable"] is True  # not ours to undo
    assert "NodeCordonStart" not in c.event_reasons(NODE)
    assert "NodeAlreadyCordoned" in c.event_reasons(NODE)


def test_without_a_matching_rule_nothing_on_the_node_changes(
    simulator, agent_run, clock, tmp_path, api
):
    c = cluster(api)
    sim, agent = start(simulator, agent_run, clock, tmp_path, api, node_pools=["gpupool"])
    eid = sim.event_id(0)
    assert agent.wait_for(lambda a: "Removed" in node_phases(tmp_path / "records.jsonl", eid), 900)
    assert node_phases(tmp_path / "records.jsonl", eid) == ["FirstSeen", "Started", "Removed"]
    assert c.evictions == [] and c.event_reasons() == []
    assert not c.get_node(NODE)["spec"].get("unschedulable")
    assert all(r["NodePool"] == "nodepool1" for r in rows(tmp_path / "records.jsonl"))


def test_an_event_cancelled_mid_drain_ends_the_drain_and_uncordons(
    simulator, agent_run, clock, tmp_path, api
):
    c = cluster(api)  # web-1's replacement never gets ready: web-2 stays refused
    sc = scenario(not_before=600.0, remove=90.0, remove_after_start=None)
    sim, agent = start(simulator, agent_run, clock, tmp_path, api, sc=sc, approve_when_drained=True)
    eid = sim.event_id(0)
    assert agent.wait_for(
        lambda a: "NodeUncordoned" in node_phases(tmp_path / "records.jsonl", eid), 300
    )
    assert node_phases(tmp_path / "records.jsonl", eid) == [
        "FirstSeen",
        "NodeCordoned",
        "Removed",  # cancelled while web-2 was still refused
        "NodeDrainFailed",
        "NodeUncordoned",
    ]
    failed = next(r for r in rows(tmp_path / "records.jsonl") if r["Phase"] == "NodeDrainFailed")
    assert failed["NodeDetail"].startswith("the event has ended; pods left: default/web-2")
    assert "NodeDrainError" in c.event_reasons(NODE)
    assert not c.get_node(NODE)["spec"].get("unschedulable")
    assert not [r for r in sim.requests if r.method == "POST"]  # never approved


def test_a_node_unreadable_at_start_is_read_again_when_an_event_needs_its_pool(
    simulator, agent_run, clock, tmp_path, api
):
    sim, agent = start(simulator, agent_run, clock, tmp_path, api, approve_when_drained=True)
    assert agent.messages("cannot read this node from the API server")  # not there yet
    c = cluster(api)  # the node (and its pool label) appear before the event does
    c.replacements_ready = True
    eid = sim.event_id(0)
    assert agent.wait_for(
        lambda a: "NodeUncordoned" in node_phases(tmp_path / "records.jsonl", eid), 300
    )
    assert node_phases(tmp_path / "records.jsonl", eid) == STEPS
    steps = [r for r in rows(tmp_path / "records.jsonl") if r["Phase"] != "FirstSeen"]
    assert {r["NodePool"] for r in steps} == {"nodepool1"}  # on the identity from then on
