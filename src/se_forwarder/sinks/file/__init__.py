"""Records as JSON Lines in a local file, rotated by size."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..base import SinkKind
from ..kinds import register
from .config import FileSinkConfig as Config

if TYPE_CHECKING:
    from ..base import Sink, SinkContext


def build(cfg: Config, cx: SinkContext) -> Sink:
    from .sink import FileSink

    return FileSink(
        cfg.path,
        heartbeat_path=cfg.heartbeat_path,
        platform_path=cfg.platform_path,
        max_file_bytes=cfg.max_file_bytes,
        backups=cfg.backups,
        limits=cfg.limits(FileSink.DEFAULT_LIMITS),
    )


KIND = register(SinkKind("file", Config, build))
