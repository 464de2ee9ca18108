"""The Kubernetes API, as the node agent uses it: its own Node, the pods on it, evictions and
events. The one module that imports lightkube (the ``kubernetes`` extra), and only when
``[kubernetes]`` is configured.

In-cluster: the pod's service account (``token``, re-read as the kubelet rotates it, and
``ca.crt``) from ``service_account_dir``; the API server from ``api_server`` or
``KUBERNETES_SERVICE_HOST``/``PORT``, reached directly (no proxy variables read, as IMDS is).
Every answer that is not a success is a ``KubernetesError`` carrying the status.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import httpx2
from lightkube import ApiError, Client
from lightkube.config.kubeconfig import KubeConfig
from lightkube.config.models import Cluster, User
from lightkube.models.core_v1 import EventSource, ObjectReference
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Event, Node, Pod
from lightkube.types import PatchType

from ..errors import KubernetesError
from .config import KubernetesConfig

MIRROR = "kubernetes.io/config.mirror"
COMPONENT = "se-forwarder"


@dataclass(frozen=True, slots=True)
class NodeView:
    name: str
    uid: str | None
    resource_version: str
    unschedulable: bool
    taints: tuple[str, ...]  # keys
    labels: dict[str, str]
    annotations: dict[str, str]


@dataclass(frozen=True, slots=True)
class PodView:
    namespace: str
    name: str
    owner_kind: str | None  # the controller's kind (DaemonSet, ReplicaSet, ...)
    mirror: bool  # a static pod's mirror: the kubelet's, never evicted
    finished: bool  # Succeeded or Failed: nothing left to move

    @property
    def evictable(self) -> bool:
        return self.owner_kind != "DaemonSet" and not self.mirror and not self.finished

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


class NodeApi:
    """Calls about one node; thread-safe as httpx's client is."""

    def __init__(self, config: KubernetesConfig) -> None:
        self.node = config.node_name
        self.events_namespace = config.events_namespace
        sa = config.service_account_dir
        server = config.api_server or _in_cluster_server()
        kube = KubeConfig.from_one(
            cluster=Cluster(server=server, certificate_auth=str(sa / "ca.crt")),
            user=User(token_file=str(sa / "token")),
        )
        self.client = Client(kube, timeout=httpx2.Timeout(config.timeout), trust_env=False)

    def close(self) -> None:
        self.client.close()

    def get_node(self) -> NodeView:
        return _node_view(self._call(lambda: self.client.get(Node, self.node)))

    def patch_node(self, patch: dict[str, Any], resource_version: str | None = None) -> NodeView:
        """A merge patch; with ``resource_version`` it fails (409) if the node changed since."""
        if resource_version is not None:
            patch = {
                **patch,
                "metadata": {**patch.get("metadata", {}), "resourceVersion": resource_version},
            }
        return _node_view(
            self._call(
                lambda: self.client.patch(Node, self.node, patch, patch_type=PatchType.MERGE)
            )
        )

    def set_condition(self, kind: str, status: bool, reason: str, message: str, at_ms: int) -> None:
        """The node's condition ``kind`` (strategic merge by type, on /status)."""
        when = _time(at_ms).strftime("%Y-%m-%dT%H:%M:%SZ")
        cond = {
            "type": kind,
            "status": "True" if status else "False",
            "reason": reason,
            "message": message,
            "lastHeartbeatTime": when,
            "lastTransitionTime": when,
        }
        self._call(
            lambda: self.client.patch(
                Node.Status,
                self.node,
                {"status": {"conditions": [cond]}},
                patch_type=PatchType.STRATEGIC,
            )
        )

    def pods(self) -> list[PodView]:
        items = self._call(
            lambda: list(self.client.list(Pod, namespace="*", fields={"spec.nodeName": self.node}))
        )
        return [_pod_view(p) for p in items]

    def evict(self, pod: PodView) -> int:
        """201 evicted, 404 already gone, 429 a budget refuses it for now; else raises."""
        body = Pod.Eviction(metadata=ObjectMeta(name=pod.name, namespace=pod.namespace))
        try:
            self._call(lambda: self.client.create(body, name=pod.name, namespace=pod.namespace))
        except KubernetesError as exc:
            if exc.status in (404, 429):
                return exc.status
            raise
        return 201

    def event(
        self, reason: str, message: str, *, warning: bool, uid: str | None, at_ms: int
    ) -> None:
        """A core/v1 Event about the node, as the kubelet and AKS's remediator make them."""
        when = _time(at_ms)
        ev = Event(
            metadata=ObjectMeta(generateName=f"{self.node}.", namespace=self.events_namespace),
            involvedObject=ObjectReference(apiVersion="v1", kind="Node", name=self.node, uid=uid),
            reason=reason,
            message=message[:1024],
            type="Warning" if warning else "Normal",
            source=EventSource(component=COMPONENT, host=self.node),
            firstTimestamp=when,
            lastTimestamp=when,
            count=1,
            reportingComponent=COMPONENT,
            reportingInstance=self.node,
        )
        self._call(lambda: self.client.create(ev, namespace=self.events_namespace))

    @staticmethod
    def _call(fn: Any) -> Any:
        try:
            return fn()
        except ApiError as exc:
            status = exc.status.code if exc.status is not None else None
            message = exc.status.message if exc.status is not None else str(exc)
            raise KubernetesError(f"{status}: {message}", status) from None
        except (httpx2.HTTPError, OSError) as exc:
            raise KubernetesError(f"cannot reach the API server: {exc}") from None


def _in_cluster_server() -> str:
    host, port = (
        os.environ.get("KUBERNETES_SERVICE_HOST"),
        os.environ.get("KUBERNETES_SERVICE_PORT"),
    )
    if not host or not port:
        raise KubernetesError(
            "no API server: set kubernetes.api_server, or run in a pod "
            "(KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT)"
        )
    return f"https://[{host}]:{port}" if ":" in host else f"https://{host}:{port}"


def _time(at_ms: int) -> datetime:
    return datetime.fromtimestamp(at_ms / 1000, UTC)


def _node_view(node: Any) -> NodeView:
    meta, spec = node.metadata, node.spec
    return NodeView(
        name=meta.name,
        uid=meta.uid,
        resource_version=meta.resourceVersion or "",
        unschedulable=bool(spec and spec.unschedulable),
        taints=tuple(t.key for t in (spec.taints or [])) if spec else (),
        labels=dict(meta.labels or {}),
        annotations=dict(meta.annotations or {}),
    )


def _pod_view(pod: Any) -> PodView:
    meta = pod.metadata
    owner = next((r for r in meta.ownerReferences or [] if r.controller), None)
    phase = pod.status.phase if pod.status else None
    return PodView(
        namespace=meta.namespace or "default",
        name=meta.name,
        owner_kind=owner.kind if owner else None,
        mirror=MIRROR in (meta.annotations or {}),
        finished=phase in ("Succeeded", "Failed"),
    )
