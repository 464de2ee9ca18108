"""``[policy.service]``: early approval across a service, through a coordinator in Blob Storage
(docs/policy.md, "Early approval across a service"). Opt-in: absent, nothing is coordinated and
no rule may say ``approve = "service"``."""

from __future__ import annotations

from typing import Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ..config_types import OptionalPath


class ServiceConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    tag: str = Field("service", min_length=1, max_length=512)  # the tag naming the service
    max_in_impact: int = Field(1, ge=1, le=1000)  # N
    max_fraction: float | None = Field(None, gt=0, le=1)  # or this fraction of service_size
    service_size: int | None = Field(None, ge=1)
    spread: Literal["zone", "fault-domain", "none"] = "zone"
    account_url: str  # the coordinator's storage account (managed identity)
    container: str = Field("se-forwarder-coordination", min_length=3, max_length=63)
    impact_bound_seconds: float = Field(3600.0, ge=1, le=7 * 86400)
    retry_seconds: float = Field(15.0, ge=0.1, le=600)
    ca_file: OptionalPath = None  # also trust this CA (a private endpoint, the local emulator)

    @field_validator("account_url")
    @classmethod
    def _https(cls, v: str) -> str:
        parts = urlsplit(v)
        if parts.scheme != "https" or not parts.hostname:
            raise ValueError("account_url: an https:// URL of the storage account's blob endpoint")
        return v.rstrip("/")

    @property
    def limit(self) -> int:
        return limit_of(self.max_in_impact, self.max_fraction, self.service_size)


def limit_of(max_in_impact: int, max_fraction: float | None, service_size: int | None) -> int:
    """N: ``max_in_impact``, or less when a fraction of the service's size says so (at least 1)."""
    n = max_in_impact
    if max_fraction is not None and service_size:
        n = min(n, max(1, int(max_fraction * service_size)))
    return max(1, n)
