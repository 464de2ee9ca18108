"""``[kubernetes]``: the agent on a Kubernetes node (a DaemonSet's pod), and its drain rules.

Absent: nothing of Kubernetes is imported or done. Present without ``[[kubernetes.drain]]``
rules: the node's name, pool and cluster go on every record and heartbeat, and nothing on the
node changes (observe only, as the agent's default policy). Each rule names the event types and
node pools it matches and what to do; the first matching rule decides.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ..model import EVENT_TYPES

SERVICE_ACCOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"
LIVE_MIGRATION = "LiveMigration"  # a Freeze whose Description says "Live Migration"
DRAIN_EVENT_TYPES = (*EVENT_TYPES, LIVE_MIGRATION)


class _NodeModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class DrainRule(_NodeModel):
    """``[[kubernetes.drain]]``: when (event types, node pools; empty = any) and what."""

    name: str = ""
    event_types: list[str] = Field(default_factory=list)
    node_pools: list[str] = Field(default_factory=list)
    # observe: record and tell (events, the node's condition) only; cordon: also cordon;
    # drain: cordon, then evict every pod it may (never DaemonSet or mirror pods)
    action: Literal["observe", "cordon", "drain"] = "drain"
    exclude_from_load_balancers: bool = (
        False  # label node.kubernetes.io/exclude-from-external-load-balancers
    )
    approve_when_drained: bool = False  # StartRequests once drained (an event naming this VM only)
    uncordon_after: bool = True  # after the event: undo the cordon (only one this agent made)
    margin_seconds: float = Field(15.0, ge=0)  # stop evicting this long before NotBefore
    max_seconds: float = Field(900.0, gt=0)  # the longest a drain goes on (no NotBefore: Started)

    @field_validator("event_types")
    @classmethod
    def _types(cls, v: list[str]) -> list[str]:
        known = {t.lower(): t for t in DRAIN_EVENT_TYPES}
        out = []
        for t in v:
            if t.lower() not in known:
                raise ValueError(
                    f"unknown event type {t!r} (one of {', '.join(DRAIN_EVENT_TYPES)})"
                )
            out.append(known[t.lower()])
        return out

    def matches(self, event_type: str, pool: str | None) -> bool:
        return (not self.event_types or event_type in self.event_types) and (
            not self.node_pools or pool in self.node_pools
        )


class KubernetesConfig(_NodeModel):
    # This node's name: the DaemonSet gives it from the downward API (spec.nodeName) as
    # SE_FORWARDER_KUBERNETES__NODE_NAME.
    node_name: str = Field(min_length=1)
    cluster: str = ""  # shown as Cluster; empty: the node's label cluster_label
    pool_label: str = "kubernetes.azure.com/agentpool"
    cluster_label: str = "kubernetes.azure.com/cluster"
    # The pod's service account (token, ca.crt): the API server is reached with them
    service_account_dir: Path = Path(SERVICE_ACCOUNT)
    # https://host:port; empty: https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT
    api_server: str = ""
    timeout: float = Field(10.0, gt=0, le=120)  # one API request
    events_namespace: str = "default"  # where the node's events go (as the kubelet's)
    drain: list[DrainRule] = Field(default_factory=list)

    @field_validator("api_server")
    @classmethod
    def _https(cls, v: str) -> str:
        if v and not v.startswith("https://"):
            raise ValueError("must be https://host[:port] (the API server, with the pod's CA)")
        return v.rstrip("/")

    def rule_for(
        self, event_type: str, description: str | None, pool: str | None
    ) -> DrainRule | None:
        """The first rule matching; a live migration (a Freeze saying so) is matched by
        ``LiveMigration`` first, then as the Freeze it is."""
        kinds = [event_type]
        if event_type == "Freeze" and "live migration" in (description or "").lower():
            kinds.insert(0, LIVE_MIGRATION)
        for rule in self.drain:
            for kind in kinds:
                if rule.matches(kind, pool):
                    return rule
        return None

    def words(self) -> list[str]:
        """The node's rules in words (``check-config``)."""
        out = [f"kubernetes node {self.node_name!r}: the node's rules, first match decides"]
        for i, r in enumerate(self.drain, 1):
            when = "/".join(r.event_types) or "any event"
            pools = f" on pools {', '.join(r.node_pools)}" if r.node_pools else ""
            what = {
                "observe": "tell (events, condition) only",
                "cordon": "cordon",
                "drain": "cordon and drain",
            }[r.action]
            extra = [
                x
                for x, on in (
                    ("out of external load balancers", r.exclude_from_load_balancers),
                    ("approve once drained", r.approve_when_drained and r.action == "drain"),
                    ("uncordon after", r.uncordon_after and r.action != "observe"),
                )
                if on
            ]
            label = f" ({r.name})" if r.name else ""
            out.append(
                f"  {i}{label}. {when}{pools}: {what}" + (f"; {', '.join(extra)}" if extra else "")
            )
        out.append("  otherwise: nothing on the node changes")
        return out
