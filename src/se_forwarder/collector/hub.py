"""The Event Hub channel: ``EventHubConsumerClient`` on the collector's own consumer group,
partitions balanced and checkpointed in Blob Storage (``BlobCheckpointStore``), managed identity
for both.

Per batch of events of one partition: parse every body, commit the new rows to the outbox (one
transaction, duplicates dropped), wake the delivery workers, and only then move the partition's
checkpoint to the batch's last event. A crash between the two reads the batch again at the next
start; the writer drops what it had committed.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from azure.eventhub import EventHubConsumerClient, TransportType
from azure.eventhub.extensions.checkpointstoreblob import BlobCheckpointStore

from .. import logs
from ..clock import SYSTEM
from .config import CollectorConfig
from .eventgrid import parse_body
from .writer import Writer

log = logs.get("collector")


class HubChannel:
    def __init__(self, cfg: CollectorConfig, credential: Any, writer: Writer,
                 notify: Callable[[], None]) -> None:
        self.cfg = cfg
        self.writer = writer
        self.notify = notify
        self.events = 0
        self.problems = 0
        self.ignored = 0
        self.unexpanded = 0
        blob_kw: dict[str, Any] = {}
        if cfg.checkpoint_ca_file:
            blob_kw["connection_verify"] = str(cfg.checkpoint_ca_file)
        self.checkpoints = BlobCheckpointStore(cfg.checkpoint_account_url, cfg.checkpoint_container,
                                               credential=credential, **blob_kw)
        hub_kw: dict[str, Any] = {"checkpoint_store": self.checkpoints,
                                  "load_balancing_interval": cfg.load_balancing_interval}
        if cfg.ownership_expiration:
            hub_kw["partition_ownership_expiration_interval"] = cfg.ownership_expiration
        if cfg.endpoint:  # an address of its own speaks AMQP (the SDK's default then: websockets)
            hub_kw["custom_endpoint_address"] = cfg.endpoint
            hub_kw["transport_type"] = TransportType.Amqp
        if cfg.ca_file:
            hub_kw["connection_verify"] = str(cfg.ca_file)
        self.client = EventHubConsumerClient(cfg.namespace, cfg.hub, cfg.consumer_group,
                                             credential, **hub_kw)

    def run(self) -> None:
        """Receive until :meth:`close` (from another thread)."""
        self.client.receive_batch(on_event_batch=self._on_batch, on_error=self._on_error,
                                  max_batch_size=self.cfg.max_batch, max_wait_time=1.0,
                                  prefetch=self.cfg.prefetch, starting_position="-1")

    def close(self) -> None:
        self.client.close()

    def _on_error(self, ctx: Any, exc: Exception) -> None:
        logs.event(log, logging.WARNING, "Event Hub receive failed; the client retries",
                   partition=getattr(ctx, "partition_id", None),
                   error=f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}")

    def _on_batch(self, ctx: Any, events: list[Any]) -> None:
        if not events:
            return
        now_ms = SYSTEM.wall_ms()
        notifications = []
        for event in events:
            parsed = parse_body(event.body_as_str(), now_ms)
            for problem in parsed.problems:
                logs.event(log, logging.WARNING, "unreadable platform event skipped",
                           partition=ctx.partition_id, sequence_number=event.sequence_number,
                           error=problem[:300])
            self.problems += len(parsed.problems)
            self.ignored += parsed.ignored
            self.unexpanded += parsed.unexpanded
            notifications.extend(parsed.notifications)
        self.writer.write(notifications)  # raises on a failed commit: no checkpoint then
        self.events += len(events)
        self.notify()
        ctx.update_checkpoint(events[-1])
