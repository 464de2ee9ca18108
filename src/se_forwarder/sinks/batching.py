"""A sink's batch limits (``BatchLimits``, fixed when it is built) and the settings every sink
accepts for them (``BatchConfig``: ``max_records``, ``max_bytes``, ``linger_seconds``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field

if TYPE_CHECKING:
    from ..outbox.row import OutboxRow


@dataclass(frozen=True, slots=True)
class BatchLimits:
    """A sink's batch limits, fixed when it is built (the worker reads them on every round)."""

    max_records: int = 1000
    max_bytes: int = 1_000_000  # sum of payload sizes (plus separators) in one batch
    linger_seconds: float = 1.0  # wait at most this long for a batch to fill
    max_record_bytes: int = 1_000_000  # a single record larger than this can never be sent

    def too_large(self, row: OutboxRow) -> str | None:
        """The one rule for a record too large to ever send (the worker dead-letters it unsent):
        why, or None."""
        if row.size > self.max_record_bytes:
            return f"record of {row.size} bytes is over the {self.max_record_bytes}-byte limit"
        return None


class BatchConfig(BaseModel):
    """Base of every sink's configuration model: unknown keys are errors."""

    model_config = ConfigDict(extra="forbid")

    max_records: int | None = Field(None, ge=1)
    max_bytes: int | None = Field(None, ge=1024)
    linger_seconds: float | None = Field(None, ge=0, le=60)

    def limits(self, default: BatchLimits) -> BatchLimits:
        """The sink's defaults overridden by what is configured (never above the service's
        byte limit)."""
        return BatchLimits(
            max_records=self.max_records or default.max_records,
            max_bytes=min(self.max_bytes or default.max_bytes, default.max_bytes),
            linger_seconds=default.linger_seconds
            if self.linger_seconds is None
            else self.linger_seconds,
            max_record_bytes=default.max_record_bytes,
        )
