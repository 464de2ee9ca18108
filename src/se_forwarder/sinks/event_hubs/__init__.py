"""Azure Event Hubs through ``azure-eventhub`` (imported only when this sink is built)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..base import SinkKind
from .config import EventHubsSinkConfig as Config

if TYPE_CHECKING:
    from ...config import IdentityConfig
    from ..base import Sink


def build(cfg: Config, identity: IdentityConfig) -> Sink:
    from .sink import EventHubsSink

    return EventHubsSink.from_config(cfg, identity)


KIND = SinkKind("event_hubs", Config, build)
