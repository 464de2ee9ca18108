"""Notifications to a webhook (generic JSON, Slack, Microsoft Teams) through ``httpx``, imported
only when this sink is built (the ``webhook`` extra)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..base import SinkKind
from .config import WebhookSinkConfig as Config

if TYPE_CHECKING:
    from ...config import IdentityConfig
    from ...policy import PolicyConfig
    from ..base import Sink


def build(cfg: Config, identity: IdentityConfig, *, policy: PolicyConfig | None = None) -> Sink:
    from .sink import WebhookSink

    return WebhookSink.from_config(cfg, policy)


KIND = SinkKind("webhook", Config, build, uses_policy=True)  # its messages say what the policy does
