"""``[metrics]``: where the agent's counters and gauges are exposed for Prometheus."""

from __future__ import annotations

import ipaddress

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ..config_types import OptionalPath


class MetricsConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    listen: str = ""  # "127.0.0.1:9464": an HTTP endpoint on loopback; empty: none
    textfile: OptionalPath = None  # node_exporter textfile, e.g. /var/lib/node_exporter/se.prom
    textfile_interval: float = Field(15.0, ge=1.0, le=3600.0)  # seconds between rewrites

    @field_validator("listen")
    @classmethod
    def _loopback(cls, v: str) -> str:
        if not v:
            return v
        host, sep, port = v.rpartition(":")
        host = host.strip("[]")
        if not sep or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError("must be host:port, e.g. 127.0.0.1:9464")
        if host != "localhost":
            try:
                loopback = ipaddress.ip_address(host).is_loopback
            except ValueError:
                loopback = False
            if not loopback:
                raise ValueError(
                    "metrics are served on loopback only (127.0.0.1, ::1 or "
                    "localhost); scrape through a local exporter or agent"
                )
        return v

    @property
    def enabled(self) -> bool:
        return bool(self.listen or self.textfile)

    @property
    def address(self) -> tuple[str, int]:
        host, _, port = self.listen.rpartition(":")
        return host.strip("[]"), int(port)
