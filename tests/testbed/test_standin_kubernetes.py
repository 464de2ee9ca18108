"""The Kubernetes API stand-in answers as the API server does, spoken to with plain HTTPS (not
the agent's client): evictions and budgets, cordon and its taint, optimistic concurrency, the
status subresource, events, authentication."""

from __future__ import annotations

import ssl

import httpx
import pytest

from se_forwarder_testbed.standins.kubernetes import MERGE, STRATEGIC, TOKEN, KubernetesApi

pytestmark = pytest.mark.e2e


@pytest.fixture
def api(tmp_path):
    with KubernetesApi(tmp_path) as api:
        c = api.cluster
        c.add_node("n1")
        c.add_node("n2")
        for name, node in (("web-1", "n1"), ("web-2", "n2"), ("web-3", "n2")):
            c.add_pod(name, node, labels={"app": "web"}, owner=("ReplicaSet", "web"))
        c.add_pod("kube-proxy-1", "n1", namespace="kube-system", owner=("DaemonSet", "kube-proxy"))
        c.add_pdb("web", {"app": "web"}, minAvailable=2)
        yield api


@pytest.fixture
def http(api):
    with httpx.Client(
        base_url=api.url,
        verify=ssl.create_default_context(cafile=api.service_account_dir / "ca.crt"),
        headers={"Authorization": f"Bearer {TOKEN}"},
    ) as client:
        yield client


def evict(http, name, ns="default"):
    body = {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": name, "namespace": ns},
    }
    return http.post(f"/api/v1/namespaces/{ns}/pods/{name}/eviction", json=body)


def test_an_eviction_is_refused_while_the_budget_allows_no_disruption_until_a_replacement_is_ready(
    api, http
):
    assert evict(http, "web-1").status_code == 201  # 3 healthy, 2 desired: one may go
    blocked = evict(http, "web-2")  # the replacement (on n2) is not ready yet: 2 healthy
    assert blocked.status_code == 429
    status = blocked.json()
    assert (status["kind"], status["reason"], status["code"]) == ("Status", "TooManyRequests", 429)
    assert status["details"]["causes"][0]["reason"] == "DisruptionBudget"
    assert "needs 2 healthy pods and has 2 currently" in status["details"]["causes"][0]["message"]
    assert api.cluster.ready_replacements()  # the replacement is ready: 3 healthy again
    assert evict(http, "web-2").status_code == 201
    assert evict(http, "web-2").status_code == 404  # gone
    assert [c for _, _, c in api.cluster.evictions] == [201, 429, 201, 404]


def test_two_budgets_on_one_pod_are_a_server_error_and_a_bad_body_is_refused(api, http):
    api.cluster.add_pdb("web-too", {"app": "web"}, maxUnavailable=1)
    assert evict(http, "web-1").status_code == 500
    wrong = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "web-2"}}
    assert (
        http.post("/api/v1/namespaces/default/pods/web-1/eviction", json=wrong).status_code == 400
    )


def test_an_unready_pod_goes_while_the_budget_is_healthy_and_a_finished_one_goes_always(api, http):
    c = api.cluster
    c.add_pdb("web", {"app": "web"}, minAvailable=3)  # 3 healthy, 3 desired: none may go
    c.add_pod("web-4", "n1", labels={"app": "web"}, owner=("ReplicaSet", "web"), ready=False)
    assert evict(http, "web-1").status_code == 429
    assert evict(http, "web-4").status_code == 201  # unready, budget healthy: IfHealthyBudget
    c.add_pdb("db", {"app": "db"}, minAvailable=1)
    c.add_pod("db-0", "n1", labels={"app": "db"}, ready=False)
    assert evict(http, "db-0").status_code == 429  # 0 healthy < 1 desired
    c.pods[("default", "db-0")]["status"]["phase"] = "Failed"
    assert evict(http, "db-0").status_code == 201  # a finished pod needs no budget
    c.add_pdb("batch", {"app": "batch"}, maxUnavailable=0, unhealthyPodEvictionPolicy="AlwaysAllow")
    c.add_pod("batch-0", "n1", labels={"app": "batch"}, ready=False)
    assert evict(http, "batch-0").status_code == 201


def test_pods_are_listed_by_node_with_a_field_selector(http):
    got = http.get("/api/v1/pods", params={"fieldSelector": "spec.nodeName=n1"}).json()
    assert got["kind"] == "PodList"
    assert sorted(p["metadata"]["name"] for p in got["items"]) == ["kube-proxy-1", "web-1"]
    bad = http.get("/api/v1/pods", params={"fieldSelector": "spec.schedulerName=x"})
    assert bad.status_code == 400


def test_cordon_adds_the_taint_and_a_stale_resource_version_is_a_conflict(http):
    node = http.get("/api/v1/nodes/n1").json()
    rv = node["metadata"]["resourceVersion"]
    patch = {"metadata": {"resourceVersion": rv}, "spec": {"unschedulable": True}}
    done = http.patch("/api/v1/nodes/n1", json=patch, headers={"Content-Type": MERGE})
    assert done.status_code == 200
    assert done.json()["spec"]["taints"] == [
        {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}
    ]
    assert done.json()["metadata"]["resourceVersion"] != rv
    again = http.patch("/api/v1/nodes/n1", json=patch, headers={"Content-Type": MERGE})
    assert (again.status_code, again.json()["reason"]) == (409, "Conflict")
    un = {"spec": {"unschedulable": False}}
    back = http.patch("/api/v1/nodes/n1", json=un, headers={"Content-Type": STRATEGIC}).json()
    assert "taints" not in back["spec"]
    json_patch = http.patch(
        "/api/v1/nodes/n1", json=[], headers={"Content-Type": "application/json-patch+json"}
    )
    assert json_patch.status_code == 415


def test_conditions_merge_by_type_on_the_status_subresource_only(http):
    cond = {"type": "VMEventScheduled", "status": "True", "reason": "Reboot"}
    got = http.patch(
        "/api/v1/nodes/n1/status",
        json={"status": {"conditions": [cond]}, "spec": {"unschedulable": True}},
        headers={"Content-Type": STRATEGIC},
    ).json()
    assert [c["type"] for c in got["status"]["conditions"]] == ["Ready", "VMEventScheduled"]
    assert not got["spec"].get("unschedulable")  # /status changes the status only
    main = http.patch(
        "/api/v1/nodes/n1",
        json={"status": {"conditions": []}},
        headers={"Content-Type": MERGE},
    ).json()
    assert len(main["status"]["conditions"]) == 2  # the main endpoint leaves the status be


def test_events_are_validated_as_each_api_group_does(api, http):
    core = {
        "metadata": {"generateName": "n1."},
        "involvedObject": {"kind": "Node", "name": "n1"},
        "reason": "NodeCordonStart",
        "message": "cordoning",
        "type": "Normal",
    }
    assert http.post("/api/v1/namespaces/default/events", json=core).status_code == 201
    assert (
        http.post("/api/v1/namespaces/default/events", json={**core, "type": "Info"}).status_code
        == 422
    )
    new = {
        "metadata": {"generateName": "n1."},
        "regarding": {"kind": "Node", "name": "n1"},
        "reason": "NodeDrainStart",
        "note": "draining",
        "type": "Normal",
        "action": "Drain",
        "reportingController": "se-forwarder",
        "reportingInstance": "se-forwarder-n1",
        "eventTime": "2026-12-02T00:00:00.000000Z",
    }
    url = "/apis/events.k8s.io/v1/namespaces/default/events"
    assert http.post(url, json=new).status_code == 201
    assert http.post(url, json={**new, "action": ""}).status_code == 422
    assert api.cluster.event_reasons("n1") == ["NodeCordonStart", "NodeDrainStart"]


def test_a_request_without_the_token_is_unauthorized(api):
    with httpx.Client(
        verify=ssl.create_default_context(cafile=api.service_account_dir / "ca.crt")
    ) as plain:
        assert plain.get(f"{api.url}/api/v1/nodes/n1").status_code == 401
