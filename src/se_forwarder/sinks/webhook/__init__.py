"""Notifications to a webhook (generic JSON, Slack, Microsoft Teams) through ``httpx``, imported
only when this sink is built (the ``webhook`` extra)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..base import SinkKind
from ..kinds import register
from .config import WebhookSinkConfig as Config

if TYPE_CHECKING:
    from ..base import Sink, SinkContext


def build(cfg: Config, cx: SinkContext) -> Sink:
    from .sink import WebhookSink

    return WebhookSink.from_config(cfg, cx)


KIND = register(SinkKind("webhook", Config, build))
