"""Batch settings every sink accepts (``max_records``, ``max_bytes``, ``linger_seconds``)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from .base import BatchLimits


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
