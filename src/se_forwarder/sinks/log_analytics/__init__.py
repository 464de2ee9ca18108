"""Log Analytics through the Logs Ingestion API (``azure-monitor-ingestion``, imported only when
this sink is built)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..base import SinkKind
from ..kinds import register
from .config import LogAnalyticsSinkConfig as Config

if TYPE_CHECKING:
    from ..base import Sink, SinkContext


def build(cfg: Config, cx: SinkContext) -> Sink:
    from .sink import LogAnalyticsSink

    return LogAnalyticsSink.from_config(cfg, cx)


KIND = register(SinkKind("log_analytics", Config, build))
