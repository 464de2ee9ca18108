"""``[identity]``: the Azure identity the Azure sinks and the collector use (pydantic only)."""

from __future__ import annotations

from typing import Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, field_validator


class IdentityConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kind: Literal["managed", "default"] = "managed"
    client_id: str = ""
    # Where managed-identity tokens are asked for (IMDS's protocol) instead of IMDS itself: the
    # simulator for local testing (docs/troubleshooting.md). Reached directly, never by a proxy.
    token_endpoint: str = ""

    @field_validator("token_endpoint")
    @classmethod
    def _authority(cls, v: str) -> str:
        parts = urlsplit(v.strip())
        if v and (
            parts.scheme not in ("http", "https")
            or not parts.hostname
            or parts.username
            or parts.path.strip("/")
            or parts.query
            or parts.fragment
        ):
            raise ValueError(
                "must be http://host[:port] (an endpoint answering as IMDS's "
                "managed-identity token endpoint does, e.g. `se-forwarder simulate`)"
            )
        return v.strip().rstrip("/")
