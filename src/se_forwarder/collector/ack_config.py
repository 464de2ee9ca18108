"""``[collector.preview_acknowledge]``: the collector approves, by policy, the events of VMs that
run no agent, through Azure's acknowledge API (the Maintenance resource provider's
``scheduledevents/{EventId}/acknowledge``), which is in PREVIEW: Microsoft advises against it in
production. Absent, or ``enabled = false`` (the default), the collector observes only.

The rules speak the agent's policy's vocabulary (``policy.config.EventMatch``: event types,
sources, durations), plus what only the collector sees: where a VM is (subscription, resource
group), its service and tags (Resource Graph's inventory) and how early before NotBefore."""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ..config_types import OptionalPath
from ..model import EventStatus
from ..policy.config import EventMatch

# Microsoft's page: api-version 2023-10-01-preview and later previews
_API_VERSION = re.compile(r"^(\d{4}-\d{2}-\d{2})-preview$")
FIRST_API_VERSION = "2023-10-01"


class AckRule(EventMatch):
    """``[[collector.preview_acknowledge.rules]]``: which events the collector may approve. Every
    VM the event names must match (one approval releases all of them)."""

    subscriptions: list[str] = Field(default_factory=list)  # empty: any
    resource_groups: list[str] = Field(default_factory=list)  # names, any case; empty: any
    services: list[str] = Field(default_factory=list)  # the VM's service, any case; empty: any
    tags: dict[str, str] = Field(default_factory=dict)  # each tag given, with that value
    # How early: approve at most this many seconds before NotBefore (None: as soon as it is seen)
    ahead_seconds: float | None = Field(None, ge=0)

    @model_validator(mode="after")
    def _scheduled_only(self) -> AckRule:
        if any(s != EventStatus.SCHEDULED for s in self.event_statuses):
            raise ValueError(
                "the collector approves Scheduled events only (a started event has nothing to "
                'bring forward): leave event_statuses out or say ["Scheduled"]'
            )
        return self


class PreviewAcknowledge(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = False  # true: approve by the rules below (the API is in preview)
    api_version: str = "2023-10-01-preview"
    endpoint: str = "https://management.azure.com"  # Azure Resource Manager
    ca_file: OptionalPath = None  # also trust this CA (the local stand-in)
    # Which VMs run an agent (the agent owns its VM's approval; the collector never approves
    # one): the agents' heartbeats in this Log Analytics workspace (its workspace id, a GUID;
    # "Log Analytics Reader" on it), any within `agents_lookback_hours`.
    agents_workspace_id: str = ""
    agents_lookback_hours: float = Field(48.0, gt=0, le=24 * 30)
    logs_endpoint: str = "https://api.loganalytics.io"
    logs_ca_file: OptionalPath = None
    # At most this many VMs of one service in impact at once, in the collector's view (Started
    # and not ended, or approved by it and not yet started), agents' VMs included.
    service_tag: str = Field("service", min_length=1, max_length=512)
    max_in_impact: int = Field(1, ge=1, le=1000)
    impact_bound_seconds: float = Field(3600.0, ge=1, le=7 * 86400)  # a start never ended: freed
    interval: float = Field(15.0, ge=0.1, le=3600)  # seconds between rounds of decisions
    rules: list[AckRule] = Field(default_factory=list)

    @field_validator("api_version")
    @classmethod
    def _preview(cls, v: str) -> str:
        m = _API_VERSION.match(v)
        if m is None or m.group(1) < FIRST_API_VERSION:
            raise ValueError(
                f"{v!r}: the acknowledge operation exists in api-version "
                f"{FIRST_API_VERSION}-preview and later previews"
            )
        return v

    @field_validator("endpoint", "logs_endpoint")
    @classmethod
    def _https(cls, v: str) -> str:
        if not v.startswith("https://"):
            raise ValueError("must be an https:// URL (managed identity tokens need TLS)")
        return v.rstrip("/")

    @model_validator(mode="after")
    def _knows_the_agents(self) -> PreviewAcknowledge:
        if self.enabled and not self.agents_workspace_id.strip():
            raise ValueError(
                "enabled = true needs agents_workspace_id: the Log Analytics workspace of the "
                "agents' heartbeats, so that no VM with an agent is ever approved by the collector"
            )
        return self

    def words(self) -> list[str]:
        """The collector's approvals in words, for ``check-config``."""
        if not self.enabled:
            return ["collector approvals: off (observe only; [collector.preview_acknowledge])"]
        out = [
            "collector approvals: ON, through Azure's acknowledge API, in PREVIEW (Microsoft "
            "advises against it in production); never a VM with an agent (heartbeats in the "
            f"last {self.agents_lookback_hours:g} h), at most {self.max_in_impact} VM(s) of a "
            f"service (tag {self.service_tag!r}) in impact at once"
        ]
        if not self.rules:
            out.append("  no rule: nothing is approved")
        for i, r in enumerate(self.rules, 1):
            where = [
                f"{what} {', '.join(values)}"
                for what, values in (
                    ("events", r.event_types),
                    ("from", r.event_sources),
                    ("subscriptions", r.subscriptions),
                    ("resource groups", r.resource_groups),
                    ("services", r.services),
                    ("tags", [f"{k}={v}" for k, v in r.tags.items()]),
                )
                if values
            ]
            when = (
                "as soon as seen"
                if r.ahead_seconds is None
                else f"at most {r.ahead_seconds:g}s before NotBefore"
            )
            label = f"rule {i}{f' {r.name!r}' if r.name else ''}"
            out.append(f"  {label}: {'; '.join(where) or 'every event'}: approve it {when}")
        return out
