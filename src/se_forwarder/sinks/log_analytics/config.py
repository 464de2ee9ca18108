"""``[sinks.log_analytics]``: the Logs Ingestion endpoint, the rule and its streams."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, field_validator

from ... import contract
from ..batching import BatchConfig


class LogAnalyticsSinkConfig(BatchConfig):
    endpoint: str  # https://<dcr-or-dce>.ingest.monitor.azure.com
    dcr_immutable_id: str = Field(min_length=1)
    records_stream: str = Field(default_factory=lambda: contract.table(contract.RECORDS).stream)
    heartbeats_stream: str = Field(
        default_factory=lambda: contract.table(contract.HEARTBEATS).stream
    )
    ca_file: Path | None = None  # trust this CA (local stand-ins); Azure needs nothing
    timeout: float = Field(30.0, gt=0, le=300)  # seconds per request (read); connect: min(10, this)

    @field_validator("endpoint")
    @classmethod
    def _https(cls, v: str) -> str:
        if not v.startswith("https://"):
            raise ValueError("must be an https:// logs-ingestion endpoint")
        return v.rstrip("/")

    @field_validator("dcr_immutable_id")
    @classmethod
    def _dcr_id(cls, v: str) -> str:
        if not v.startswith("dcr-"):
            raise ValueError("must be the rule's immutable id (dcr-…), not its name or resource id")
        return v

    @field_validator("records_stream", "heartbeats_stream")
    @classmethod
    def _stream(cls, v: str) -> str:
        if not v.startswith("Custom-"):
            raise ValueError("a custom stream name starts with Custom-")
        return v
