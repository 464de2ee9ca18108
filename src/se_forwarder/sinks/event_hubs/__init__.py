"""Azure Event Hubs through ``azure-eventhub`` (imported only when this sink is built)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..base import SinkKind
from ..kinds import register
from .config import EventHubsSinkConfig as Config

if TYPE_CHECKING:
    from ..base import Sink, SinkContext


def build(cfg: Config, cx: SinkContext) -> Sink:
    from .sink import EventHubsSink

    return EventHubsSink.from_config(cfg, cx)


KIND = register(SinkKind("event_hubs", Config, build))
