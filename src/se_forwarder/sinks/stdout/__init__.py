"""Records as JSON Lines on standard output (for a pipe, a container log, a quick look)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..base import SinkKind
from ..kinds import register
from .config import StdoutSinkConfig as Config

if TYPE_CHECKING:
    from ..base import Sink, SinkContext


def build(cfg: Config, cx: SinkContext) -> Sink:
    from .sink import StdoutSink

    return StdoutSink(heartbeats=cfg.heartbeats, limits=cfg.limits(StdoutSink.DEFAULT_LIMITS))


KIND = register(SinkKind("stdout", Config, build))
