"""``[imds]``: where the Instance Metadata Service is and how hard to ask it (pydantic only)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator


class ImdsConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    endpoint: str = "http://169.254.169.254"
    api_version: Literal[
        "2020-07-01",
        "2019-08-01",
        "2019-04-01",
        "2019-01-01",
        "2017-11-01",
        "2017-08-01",
        "2017-03-01",
    ] = "2020-07-01"
    first_call_timeout: float = Field(120.0, gt=0)
    timeout: float = Field(2.0, gt=0)
    max_requests_per_second: int = Field(5, ge=1, le=5)
    instance_refresh_seconds: float = Field(3600.0, gt=0)

    @field_validator("endpoint")
    @classmethod
    def _http(cls, v: str) -> str:
        if not v.startswith("http://"):
            raise ValueError(
                "must be http://host[:port] (IMDS is plain HTTP on a link-local address)"
            )
        return v.rstrip("/")
