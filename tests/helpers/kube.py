"""Building blocks for the Kubernetes node tests: a cluster in the API stand-in with a node pool,
a budget and pods, and the ``[kubernetes]`` TOML that points the agent at it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from se_forwarder_testbed.standins.kube_cluster import Cluster
from se_forwarder_testbed.standins.kubernetes import KubernetesApi

NODE = "aks-nodepool1-0"
OTHER = "aks-nodepool1-1"


def cluster(api: KubernetesApi, *, node: str = NODE) -> Cluster:
    """Two nodes of pool nodepool1; on ``node``: web-1 and web-2 (a ReplicaSet's, under a budget
    of minAvailable 2 with web-3 on the other node), a DaemonSet's pod and a static pod's
    mirror (neither may be evicted)."""
    c = api.cluster
    for name in (node, OTHER):
        c.add_node(name, labels={"kubernetes.azure.com/cluster": "MC_rg_aks1_westeurope"})
    for name, where in (("web-1", node), ("web-2", node), ("web-3", OTHER)):
        c.add_pod(name, where, labels={"app": "web"}, owner=("ReplicaSet", "web-7d4"))
    c.add_pod("kube-proxy-x1", node, namespace="kube-system", owner=("DaemonSet", "kube-proxy"))
    c.add_pod(
        f"etcd-{node}",
        node,
        namespace="kube-system",
        annotations={"kubernetes.io/config.mirror": "abc"},
    )
    c.add_pdb("web", {"app": "web"}, minAvailable=2)
    return c


def kubernetes_toml(api: KubernetesApi, *, node: str = NODE, **rule: Any) -> str:
    """``[kubernetes]`` for ``node`` with one drain rule (Reboot, pool nodepool1) and ``rule``."""
    spec = {"event_types": ["Reboot"], "node_pools": ["nodepool1"], "action": "drain", **rule}
    text = (
        f'\n[kubernetes]\nnode_name = "{node}"\napi_server = "{api.url}"\n'
        f'service_account_dir = "{api.service_account_dir}"\n\n[[kubernetes.drain]]\n'
    )
    return text + "".join(f"{k} = {json.dumps(v)}\n" for k, v in spec.items())


def rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def node_phases(path: Path, event_id: str) -> list[str]:
    return [r["Phase"] for r in rows(path) if r.get("EventId") == event_id]
