"""The sinks an agent can have, each a self-contained package that declares itself.

A package (``se_forwarder.sinks.<name>``) exposes ``KIND``, a ``SinkKind``: its configuration key,
its pydantic model (light to import), its builder, which imports the sink's module and its SDK
only when that sink is configured (an agent with the file sink alone never loads an Azure SDK),
and whether it needs the policy. The ``[sinks]`` section of the configuration is generated from
these declarations (``config.py``), so adding a sink is adding a package and naming it here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import event_hubs, file, log_analytics, stdout, webhook
from .base import Sink, SinkKind

if TYPE_CHECKING:
    from ..config import Config

# Every sink kind by configuration key, in the order sinks are built, configured and reported.
KINDS: dict[str, SinkKind] = {
    p.KIND.name: p.KIND for p in (stdout, file, log_analytics, event_hubs, webhook)
}


def build(config: Config) -> list[Sink]:
    """One sink per configured section, in ``KINDS`` order."""
    return [
        KINDS[name].make(cfg, config.identity, config.policy)
        for name, cfg in config.sinks.enabled().items()
    ]
