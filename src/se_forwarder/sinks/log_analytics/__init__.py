"""Log Analytics through the Logs Ingestion API (``azure-monitor-ingestion``, imported only when
this sink is built)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..base import SinkKind
from .config import LogAnalyticsSinkConfig as Config

if TYPE_CHECKING:
    from ...config import IdentityConfig
    from ..base import Sink


def build(cfg: Config, identity: IdentityConfig) -> Sink:
    from .sink import LogAnalyticsSink

    return LogAnalyticsSink.from_config(cfg, identity)


KIND = SinkKind("log_analytics", Config, build)
