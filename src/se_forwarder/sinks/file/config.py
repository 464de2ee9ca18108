"""``[sinks.file]``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import Field, field_validator

from ..batching import BatchConfig


class FileSinkConfig(BatchConfig):
    path: Path
    heartbeat_path: Path | None = None  # empty: heartbeats not written
    max_file_bytes: int = Field(10 * 1024 * 1024, ge=1024)  # rotate before this size
    backups: int = Field(5, ge=0)

    @field_validator("heartbeat_path", mode="before")
    @classmethod
    def _empty_is_none(cls, v: Any) -> Any:
        return None if v == "" else v
