"""``[collector]``: where the collector reads Azure's record and keeps its checkpoints, and the
collector's whole configuration (``CollectorFileConfig``: the agent's sections it shares, with
this one validated). Light to import (pydantic only): ``collect`` and ``check-config`` read the
file through it; the agent's ``Config`` keeps ``[collector]`` as an opaque table and never
imports this package."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ..config import Config
from .ack_config import PreviewAcknowledge


class CollectorConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    # The Event Hub the system topics' event subscriptions deliver to (managed identity:
    # "Azure Event Hubs Data Receiver" on the hub).
    namespace: str = ""  # <ns>.servicebus.windows.net
    hub: str = ""
    consumer_group: str = "se-forwarder-collector"  # a dedicated group: never $Default
    endpoint: str = ""  # custom endpoint address (sb://host:port), for local stand-ins
    ca_file: Path | None = None
    prefetch: int = Field(300, ge=1, le=5000)
    max_batch: int = Field(300, ge=1, le=5000)  # events per outbox commit and checkpoint
    # Partition load balancing through the checkpoint store. A collector restarted after a crash
    # takes its partitions back once the dead instance's ownership expires (default 6 x the
    # interval): the events wait in the hub meanwhile, none is lost.
    load_balancing_interval: float = Field(30.0, gt=0, le=600)
    ownership_expiration: float = Field(0.0, ge=0)  # seconds; 0: the SDK's (6 x the interval)
    # Checkpoints in Blob Storage ("Storage Blob Data Contributor" on the container).
    checkpoint_account_url: str = ""  # https://<account>.blob.core.windows.net
    checkpoint_container: str = "se-forwarder-collector"
    checkpoint_ca_file: Path | None = None
    # Azure Resource Graph ("Reader" on the subscriptions): `collect --resource-graph`, or a pass
    # every `resource_graph_interval` seconds beside the Event Hub (0: no periodic pass).
    resource_graph_endpoint: str = "https://management.azure.com"
    resource_graph_ca_file: Path | None = None
    subscriptions: list[str] = Field(default_factory=list)  # empty: every one the identity reads
    resource_graph_interval: float = Field(0.0, ge=0)
    # What exists: a pass over `resources` (VMs, Flexible scale-set instances) and
    # `computeresources` (Uniform instances) every `inventory_interval` seconds, within the
    # Resource Graph passes (0: none). One Inventory row per VM and one InventoryPass row per
    # subscription each time (10,000 VMs hourly: 240,000 rows a day): a VM a complete pass no
    # longer lists is deleted, known from Azure (record-contract.md §6).
    inventory_interval: float = Field(3600.0, ge=0)
    # Beside the Event Hub, a status read from Resource Graph waits this long before it is
    # written, so Event Grid's copy (Azure's own time of the change) wins after a downtime; the
    # Resource Graph copy is written only if Event Grid never delivered it (0: at once).
    resource_graph_settle: float = Field(900.0, ge=0)
    # Event Grid ids and RecordIds remembered to drop duplicates (oldest forgotten first).
    dedupe_window: int = Field(200_000, ge=1000)
    # Approvals from outside the VM, for VMs without an agent: Azure's acknowledge API is in
    # PREVIEW; absent or enabled = false, the collector observes only (docs/collector.md).
    preview_acknowledge: PreviewAcknowledge = Field(default_factory=PreviewAcknowledge)

    @field_validator("checkpoint_account_url", "resource_graph_endpoint")
    @classmethod
    def _https(cls, v: str) -> str:
        if v and not v.startswith("https://"):
            raise ValueError("must be an https:// URL (managed identity tokens need TLS)")
        return v.rstrip("/")

    @field_validator("consumer_group")
    @classmethod
    def _dedicated(cls, v: str) -> str:
        if v.lower() == "$default":
            raise ValueError(
                "use a consumer group of the collector's own, not $Default "
                "(readers of one group share its 5-reader limit and checkpoints)"
            )
        return v

    @model_validator(mode="after")
    def _inventory_for_approvals(self) -> CollectorConfig:
        if self.preview_acknowledge.enabled and not self.inventory_interval:
            raise ValueError(
                "preview_acknowledge needs Resource Graph's inventory (inventory_interval > 0): "
                "a VM's tags, service and group decide what the collector may approve"
            )
        return self

    def event_hub_ready(self) -> str | None:
        """Why the Event Hub channel cannot run (None: it can)."""
        missing = [
            k for k in ("namespace", "hub", "checkpoint_account_url") if not getattr(self, k)
        ]
        return f"set collector.{', collector.'.join(missing)}" if missing else None


class CollectorFileConfig(Config):
    """The configuration as ``se-forwarder collect`` (and ``check-config``) reads it: the agent's
    sections, and ``[collector]`` validated."""

    collector: CollectorConfig | None = None  # type: ignore[assignment]
