"""The agent on a Kubernetes node (``[kubernetes]``): the node's identity on every row and the
drain rules. lightkube (the ``kubernetes`` extra) is imported only when it is configured."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..clock import Clock
    from ..imds.client import RateLimiter
    from ..imds.config import ImdsConfig
    from ..outbox import Store
    from .config import KubernetesConfig
    from .controller import KubeActions


def build(
    config: KubernetesConfig,
    store: Store,
    imds: ImdsConfig,
    limiter: RateLimiter,
    clock: Clock,
    wake: Callable[[], None] | None = None,
) -> KubeActions:
    """The node's actions; approvals (when a rule approves) over their own IMDS connection,
    inside the poll loop's request budget, as the policy's are."""
    from ..approvals import client_for
    from .api import NodeApi
    from .controller import KubeActions

    client = client_for(imds, limiter, clock)
    return KubeActions(config, NodeApi(config), store, clock, approvals_client=client, wake=wake)
