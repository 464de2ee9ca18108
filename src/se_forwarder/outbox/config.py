"""``[spool]``: the outbox's bound and the dead-letter file's (pydantic only)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class SpoolConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    max_bytes: int = Field(256 * 1024 * 1024, ge=1024)
    # dead-letter.jsonl's bound, and its previous file's (delivery/dead_letters.py)
    dead_letter_max_bytes: int = Field(16 * 1024 * 1024, ge=64 * 1024)
