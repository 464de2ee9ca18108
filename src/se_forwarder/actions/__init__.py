"""Acting on events: the policy's decisions, hooks and approvals, beside the poll loop."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from .stats import ActionStats, Observe

if TYPE_CHECKING:
    from ..clock import Clock
    from ..identity.config import IdentityConfig
    from ..imds.client import RateLimiter
    from ..imds.config import ImdsConfig
    from ..outbox import Store
    from ..policy import PolicyConfig
    from .controller import Actions


def build(
    config: PolicyConfig | None,
    store: Store,
    imds: ImdsConfig,
    limiter: RateLimiter,
    clock: Clock,
    wake: Callable[[], None] | None = None,
    identity: IdentityConfig | None = None,
) -> Actions | Observe:
    """The policy's actions, or ``Observe`` when it has none to take (the controller, hooks and
    approver are imported only then); ``config`` None: no ``[policy]``, the default, which
    observes. ``wake``: the delivery workers (a notice is waiting)."""
    if config is None or not config.acts:
        return Observe()
    from .controller import Actions

    return Actions.build(config, store, imds, limiter, clock, wake, identity)


__all__ = ["ActionStats", "Observe", "build"]
