"""The objects behind the Kubernetes API stand-in (``kubernetes.py``): nodes, pods,
PodDisruptionBudgets, events, and the few controllers whose effects a node agent sees.

What it enforces, as the API server and its controllers do. Reviewed against: the eviction
handler itself, kubernetes/kubernetes ``pkg/registry/core/pod/storage/eviction.go`` (read for
this: ``canIgnorePDB``, ``checkAndDecrement``, the unhealthy-pod policy, the 500 for several
budgets, the answers' texts and causes); the rest against the Kubernetes API reference as
``../shared/spec/kubernetes.md`` sums it up (Node, Pod, Eviction ``policy/v1``,
PodDisruptionBudget, Event ``core/v1`` and ``events.k8s.io/v1``, optimistic concurrency), the
node strategy (``PrepareForUpdate``: status apart) and the node lifecycle controller (the
unschedulable taint), from their documented behaviour:

- every write bumps ``metadata.resourceVersion``; a patch carrying a stale one is a ``409
  Conflict`` ("the object has been modified; please apply your changes to the latest version
  and try again");
- a Node's main endpoint ignores ``status`` and its ``/status`` endpoint ignores everything
  else (the node strategy's ``PrepareForUpdate``); a strategic-merge patch merges
  ``status.conditions`` by ``type`` and replaces ``spec.taints`` (no patch strategy), a
  merge patch (RFC 7386) replaces lists; ``null`` deletes a key;
- ``spec.unschedulable: true`` brings the taint ``node.kubernetes.io/unschedulable:NoSchedule``
  and ``false`` takes it away (the node lifecycle controller's ``TaintNodesByCondition``, done
  here at once);
- an eviction of a pod that is finished, Pending or already terminating, or that no budget
  selects, deletes it (``201``); with one budget it is allowed when the budget's
  ``disruptionsAllowed`` (healthy pods minus desired healthy pods) is positive, or the pod is
  not ready and either the budget says ``unhealthyPodEvictionPolicy: AlwaysAllow`` or it is
  healthy (``IfHealthyBudget``, the default: current >= desired > 0), else ``429`` with the
  cause ``DisruptionBudget``; two or more budgets: ``500``; a pod that is gone: ``404``;
- a pod owned by a ReplicaSet that is evicted is replaced (the ReplicaSet controller) on another
  schedulable node, not ready until ``ready_replacements()`` (or at once with
  ``replacements_ready=True``): the "replacement ready" that unblocks a budget later.

Simplifications, said so: pods are deleted at once (grace period 0); a budget's expected count
is the number of pods its selector matches (the real one reads the controller's scale).
"""

from __future__ import annotations

import copy
import itertools
import threading
import uuid
from dataclasses import dataclass, field
from typing import Any

from .kube_rules import ApiFailure, count, get, matches, merge_patch, not_found, ready, required

UNSCHEDULABLE_TAINT = "node.kubernetes.io/unschedulable"
MIRROR = "kubernetes.io/config.mirror"
NOW = "2026-12-02T00:00:00Z"  # creationTimestamp of what the stand-in makes; not a clock


@dataclass
class Cluster:
    """The stand-in's objects; every method is safe from the server's threads."""

    replacements_ready: bool = False
    nodes: dict[str, dict[str, Any]] = field(default_factory=dict)
    pods: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    pdbs: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    events: list[dict[str, Any]] = field(default_factory=list)
    evictions: list[tuple[str, str, int]] = field(default_factory=list)  # (ns, pod, code)
    lock: threading.RLock = field(default_factory=threading.RLock)
    _rv: itertools.count[int] = field(default_factory=lambda: itertools.count(1000))
    _names: itertools.count[int] = field(default_factory=lambda: itertools.count(1))

    def _meta(self, name: str, namespace: str | None = None, **extra: Any) -> dict[str, Any]:
        meta = {
            "name": name,
            "uid": str(uuid.uuid4()),
            "resourceVersion": str(next(self._rv)),
            "creationTimestamp": NOW,
            **extra,
        }
        if namespace is not None:
            meta["namespace"] = namespace
        return meta

    def resource_version(self) -> str:
        """A list's resourceVersion (the latest write's)."""
        with self.lock:
            return str(next(self._rv))

    # -- set-up (tests and the demo) ----------------------------------------------------------

    def add_node(
        self, name: str, *, pool: str = "nodepool1", labels: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        node = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": self._meta(
                name,
                labels={
                    "kubernetes.io/hostname": name,
                    "kubernetes.azure.com/agentpool": pool,
                    "agentpool": pool,
                    **(labels or {}),
                },
                annotations={},
            ),
            "spec": {},
            "status": {
                "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}]
            },
        }
        with self.lock:
            self.nodes[name] = node
        return node

    def add_pod(
        self,
        name: str,
        node: str,
        *,
        namespace: str = "default",
        labels: dict[str, Any] | None = None,
        owner: tuple[str, str] | None = None,
        ready: bool = True,
        annotations: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """``owner``: (kind, name), e.g. ("ReplicaSet", "web-5d9") or
        ("DaemonSet", "kube-proxy")."""
        refs = (
            [
                {
                    "apiVersion": "apps/v1",
                    "kind": owner[0],
                    "name": owner[1],
                    "uid": str(
                        uuid.uuid5(uuid.NAMESPACE_OID, f"{namespace}/{owner[0]}/{owner[1]}")
                    ),
                    "controller": True,
                }
            ]
            if owner
            else []
        )
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": self._meta(
                name,
                namespace,
                labels=labels or {},
                annotations=annotations or {},
                ownerReferences=refs,
            ),
            "spec": {"nodeName": node, "containers": [{"name": "main", "image": "app"}]},
            "status": {
                "phase": "Running",
                "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
            },
        }
        with self.lock:
            self.pods[(namespace, name)] = pod
        return pod

    def add_pdb(
        self, name: str, selector: dict[str, Any], *, namespace: str = "default", **spec: Any
    ) -> None:
        """``spec``: ``minAvailable`` or ``maxUnavailable`` (an int or "50%")."""
        with self.lock:
            self.pdbs[(namespace, name)] = {
                "apiVersion": "policy/v1",
                "kind": "PodDisruptionBudget",
                "metadata": self._meta(name, namespace),
                "spec": {"selector": {"matchLabels": selector}, **spec},
            }

    def unready_replacements(self) -> list[str]:
        """The replacement pods not ready yet, by name."""
        with self.lock:
            return [
                p["metadata"]["name"]
                for p in self.pods.values()
                if not ready(p) and p["metadata"].get("annotations", {}).get("standin/replacement")
            ]

    def ready_replacements(self, names: list[str] | None = None) -> list[str]:
        """Make replacement pods ready (all, or ``names``): the "replacement ready" that
        unblocks a budget."""
        with self.lock:
            out = []
            for pod in self.pods.values():
                name = pod["metadata"]["name"]
                if name in self.unready_replacements() and (names is None or name in names):
                    pod["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
                    pod["metadata"]["resourceVersion"] = str(next(self._rv))
                    out.append(name)
            return out

    # -- nodes ------------------------------------------------------------------------------

    def get_node(self, name: str) -> dict[str, Any]:
        with self.lock:
            if name not in self.nodes:
                raise not_found("nodes", name)
            return copy.deepcopy(self.nodes[name])

    def patch_node(self, name: str, patch: Any, *, strategic: bool, status: bool) -> dict[str, Any]:
        if not isinstance(patch, dict):
            raise ApiFailure(400, "BadRequest", "the patch must be a JSON object")
        with self.lock:
            old = self.nodes.get(name)
            if old is None:
                raise not_found("nodes", name)
            want = (patch.get("metadata") or {}).get("resourceVersion")
            if want is not None and want != old["metadata"]["resourceVersion"]:
                raise ApiFailure(
                    409,
                    "Conflict",
                    f'Operation cannot be fulfilled on nodes "{name}": the object has been '
                    "modified; please apply your changes to the latest version and try again",
                    {"name": name, "kind": "nodes"},
                )
            keys = {"status.conditions": "type"} if strategic else {}
            new = merge_patch(old, patch, keys)
            if new["metadata"].get("name") != name:
                raise ApiFailure(422, "Invalid", "metadata.name: Invalid value: field is immutable")
            if status:  # /status: only the status changes
                new = {**copy.deepcopy(old), "status": new.get("status", {})}
            else:  # the main endpoint: the status stays
                new["status"] = copy.deepcopy(old["status"])
            new["metadata"]["resourceVersion"] = str(next(self._rv))
            self._unschedulable_taint(new)
            self.nodes[name] = new
            return copy.deepcopy(new)

    def _unschedulable_taint(self, node: dict[str, Any]) -> None:
        spec = node.setdefault("spec", {})
        taints = [t for t in spec.get("taints") or [] if t.get("key") != UNSCHEDULABLE_TAINT]
        if spec.get("unschedulable"):
            taints.append({"key": UNSCHEDULABLE_TAINT, "effect": "NoSchedule"})
        if taints:
            spec["taints"] = taints
        else:
            spec.pop("taints", None)

    # -- pods and evictions -------------------------------------------------------------------

    def list_pods(self, namespace: str | None, selectors: list[tuple[str, str, bool]]) -> list[Any]:
        """``selectors``: (field, value, equal) from a fieldSelector."""
        fields = {
            "spec.nodeName": lambda p: p["spec"].get("nodeName", ""),
            "metadata.name": lambda p: p["metadata"]["name"],
            "metadata.namespace": lambda p: p["metadata"]["namespace"],
            "status.phase": lambda p: p["status"].get("phase", ""),
        }
        for f, _, _ in selectors:
            if f not in fields:
                raise ApiFailure(400, "BadRequest", f"field label not supported: {f}")
        with self.lock:
            return [
                copy.deepcopy(p)
                for (ns, _), p in sorted(self.pods.items())
                if (namespace is None or ns == namespace)
                and all((fields[f](p) == v) == eq for f, v, eq in selectors)
            ]

    def evict(self, namespace: str, name: str, body: Any) -> None:
        if not isinstance(body, dict) or body.get("kind") != "Eviction":
            raise ApiFailure(400, "BadRequest", "the body must be a policy/v1 Eviction")
        if (body.get("metadata") or {}).get("name") != name:
            raise ApiFailure(
                400, "BadRequest", "name in URL does not match name in Eviction object"
            )
        with self.lock:
            try:
                self._evict(namespace, name)
            except ApiFailure as exc:
                self.evictions.append((namespace, name, exc.code))
                raise
            self.evictions.append((namespace, name, 201))

    def _evict(self, namespace: str, name: str) -> None:
        pod = self.pods.get((namespace, name))
        if pod is None:
            raise not_found("pods", name)
        budgets = [
            b
            for (ns, _), b in self.pdbs.items()
            if ns == namespace and matches(b["spec"]["selector"], pod["metadata"]["labels"])
        ]
        if _can_ignore_budgets(pod):
            budgets = []
        if len(budgets) > 1:
            raise ApiFailure(
                500,
                "",
                "This pod has more than one PodDisruptionBudget, which the eviction "
                "subresource does not support.",
            )
        if budgets:
            status = self.budget_status(budgets[0])
            healthy, desired = status["currentHealthy"], status["desiredHealthy"]
            always = budgets[0]["spec"].get("unhealthyPodEvictionPolicy") == "AlwaysAllow"
            unhealthy_ok = not ready(pod) and (always or healthy >= desired > 0)
            if status["disruptionsAllowed"] <= 0 and not unhealthy_ok:
                raise ApiFailure(
                    429,
                    "TooManyRequests",
                    "Cannot evict pod as it would violate the pod's disruption budget.",
                    {
                        "causes": [
                            {
                                "reason": "DisruptionBudget",
                                "message": "The disruption budget "
                                f"{budgets[0]['metadata']['name']} "
                                f"needs {desired} healthy pods and has {healthy} currently",
                            }
                        ]
                    },
                )
        del self.pods[(namespace, name)]
        self._replace(pod)

    def budget_status(self, pdb: dict[str, Any]) -> dict[str, int]:
        ns = pdb["metadata"]["namespace"]
        sel = pdb["spec"]["selector"]
        with self.lock:
            matched = [
                p
                for (pns, _), p in self.pods.items()
                if pns == ns and matches(sel, p["metadata"]["labels"])
            ]
        expected = len(matched)
        healthy = sum(1 for p in matched if ready(p))
        spec = pdb["spec"]
        if "minAvailable" in spec:
            desired = count(spec["minAvailable"], expected)
        else:
            desired = max(0, expected - count(spec.get("maxUnavailable", 0), expected))
        return {
            "expectedPods": expected,
            "currentHealthy": healthy,
            "desiredHealthy": desired,
            "disruptionsAllowed": max(0, healthy - desired),
        }

    def _replace(self, pod: dict[str, Any]) -> None:
        owner = next(
            (r for r in pod["metadata"].get("ownerReferences") or [] if r.get("controller")), None
        )
        if owner is None or owner["kind"] != "ReplicaSet":
            return
        gone = pod["spec"]["nodeName"]
        target = next(
            (
                n
                for n, node in sorted(self.nodes.items())
                if n != gone and not node["spec"].get("unschedulable")
            ),
            None,
        )
        if target is None:
            return  # Pending: nowhere to run (not listed on any node)
        self.add_pod(
            f"{owner['name']}-r{next(self._names)}",
            target,
            namespace=pod["metadata"]["namespace"],
            labels=pod["metadata"]["labels"],
            owner=("ReplicaSet", owner["name"]),
            ready=self.replacements_ready,
            annotations={"standin/replacement": "true"},
        )

    # -- events ------------------------------------------------------------------------------

    def create_event(self, namespace: str, body: Any, *, group: str) -> dict[str, Any]:
        """``group``: "" (core/v1) or "events.k8s.io" (v1); validated as each API does."""
        if not isinstance(body, dict):
            raise ApiFailure(400, "BadRequest", "the body must be a JSON object")
        missing = [k for k in required(group) if not get(body, k)]
        if body.get("type") not in ("Normal", "Warning"):
            missing.append("type (Normal or Warning)")
        if group and len(body.get("note") or "") > 1024:
            missing.append("note (at most 1 kB)")
        if missing:
            raise ApiFailure(
                422, "Invalid", f"Event is invalid: {', '.join(missing)}: Required value"
            )
        meta = body.get("metadata") or {}
        name = meta.get("name") or f"{meta.get('generateName', 'event.')}{uuid.uuid4().hex[:10]}"
        event = {**copy.deepcopy(body), "metadata": {**meta, **self._meta(name, namespace)}}
        event["metadata"].pop("generateName", None)
        event["_group"] = group
        with self.lock:
            self.events.append(event)
        return {k: v for k, v in event.items() if k != "_group"}

    def event_reasons(self, node: str | None = None) -> list[str]:
        """The reasons of the events created, in order (about ``node`` only, if given)."""
        with self.lock:
            return [
                e.get("reason", "")
                for e in self.events
                if node is None
                or (e.get("involvedObject") or e.get("regarding") or {}).get("name") == node
            ]


def _can_ignore_budgets(pod: dict[str, Any]) -> bool:
    """eviction.go's ``canIgnorePDB``: a finished, Pending or terminating pod goes at once."""
    phase = pod.get("status", {}).get("phase")
    return phase in ("Succeeded", "Failed", "Pending") or bool(
        pod["metadata"].get("deletionTimestamp")
    )
