"""``[sinks.file]``."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field

from ...config_types import OptionalPath
from ..batching import BatchConfig


class FileSinkConfig(BatchConfig):
    path: Path
    heartbeat_path: OptionalPath = None  # empty: heartbeats not written
    # the collector's rows (ScheduledEventsPlatform_CL); empty: not written (the agent has none)
    platform_path: OptionalPath = None
    max_file_bytes: int = Field(10 * 1024 * 1024, ge=1024)  # rotate before this size
    backups: int = Field(5, ge=0)
