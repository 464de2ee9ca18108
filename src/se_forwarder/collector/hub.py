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

from azure.core.exceptions import AzureError
from azure.eventhub import EventHubConsumerClient, TransportType
from azure.eventhub.extensions.checkpointstoreblob import BlobCheckpointStore

from .. import logs
from ..clock import Clock
from ..logs import one_line
from .config import CollectorConfig
from .eventgrid import parse_body
from .stats import HubStats, PartitionStats
from .writer import Writer

log = logs.get("collector")


class HubChannel:
    def __init__(
        self,
        cfg: CollectorConfig,
        credential: Any,
        writer: Writer,
        notify: Callable[[], None],
        clock: Clock,
    ) -> None:
        self.cfg, self.writer, self.notify, self.clock = cfg, writer, notify, clock
        self.stats = HubStats()
        blob_kw: dict[str, Any] = {}
        if cfg.checkpoint_ca_file:
            blob_kw["connection_verify"] = str(cfg.checkpoint_ca_file)
        self.checkpoints = BlobCheckpointStore(
            cfg.checkpoint_account_url, cfg.checkpoint_container, credential=credential, **blob_kw
        )
        hub_kw: dict[str, Any] = {
            "checkpoint_store": self.checkpoints,
            "load_balancing_interval": cfg.load_balancing_interval,
        }
        if cfg.ownership_expiration:
            hub_kw["partition_ownership_expiration_interval"] = cfg.ownership_expiration
        if cfg.endpoint:  # an address of its own speaks AMQP (the SDK's default then: websockets)
            hub_kw["custom_endpoint_address"] = cfg.endpoint
            hub_kw["transport_type"] = TransportType.Amqp
        if cfg.ca_file:
            hub_kw["connection_verify"] = str(cfg.ca_file)
        self.client = EventHubConsumerClient(
            cfg.namespace, cfg.hub, cfg.consumer_group, credential, **hub_kw
        )

    def run(self) -> None:
        """Receive until :meth:`close` (from another thread)."""
        self.client.receive_batch(
            on_event_batch=self._on_batch,
            on_error=self._on_error,
            on_partition_initialize=self._on_claimed,
            on_partition_close=self._on_released,
            max_batch_size=self.cfg.max_batch,
            max_wait_time=1.0,
            prefetch=self.cfg.prefetch,
            starting_position="-1",
        )

    def close(self) -> None:
        self.client.close()

    def _partition(self, ctx: Any) -> PartitionStats:
        return self.stats.by_partition.setdefault(str(ctx.partition_id), PartitionStats())

    def _on_claimed(self, ctx: Any) -> None:
        self._partition(ctx).owned = True
        logs.event(log, logging.INFO, "partition claimed", partition=ctx.partition_id)

    def _on_released(self, ctx: Any, reason: Any) -> None:
        self._partition(ctx).owned = False
        logs.event(
            log,
            logging.INFO,
            "partition released",
            partition=ctx.partition_id,
            reason=getattr(reason, "name", str(reason)),
        )

    def _on_error(self, ctx: Any, exc: Exception) -> None:
        self.stats.receive_errors += 1
        self.stats.last_receive_error = f"{type(exc).__name__}: {one_line(str(exc))}"
        logs.event(
            log,
            logging.WARNING,
            "Event Hub receive failed; the client retries",
            partition=getattr(ctx, "partition_id", None),
            error=self.stats.last_receive_error,
        )

    def _on_batch(self, ctx: Any, events: list[Any]) -> None:
        if not events:
            return
        now_ms = self.clock.wall_ms()
        notifications = []
        for event in events:
            parsed = parse_body(event.body_as_str(), now_ms)
            for problem in parsed.problems:
                logs.event(
                    log,
                    logging.WARNING,
                    "unreadable platform event skipped",
                    partition=ctx.partition_id,
                    sequence_number=event.sequence_number,
                    error=problem[:300],
                )
            self.stats.add(parsed)
            notifications.extend(parsed.notifications)
        self.writer.write(notifications)  # raises on a failed commit: no checkpoint then
        self.notify()
        part = self._partition(ctx)
        last = events[-1]
        part.events += len(events)
        part.last_sequence_number = last.sequence_number
        if last.enqueued_time is not None:
            part.last_event_at = last.enqueued_time.timestamp()
        self._checkpoint(ctx, last, part)

    def _checkpoint(self, ctx: Any, last: Any, part: PartitionStats) -> None:
        """After the commit. A failure leaves the checkpoint behind: the batch is read again
        after a restart or a move of the partition, and its rows dropped as duplicates."""
        try:
            ctx.update_checkpoint(last)
        except AzureError as exc:
            self.stats.checkpoint_failures += 1
            logs.event(
                log,
                logging.WARNING,
                "checkpoint not saved; committed rows will be read again and dropped as duplicates",
                partition=ctx.partition_id,
                sequence_number=last.sequence_number,
                error=f"{type(exc).__name__}: {one_line(str(exc))}",
            )
            return
        part.last_checkpoint_at = self.clock.wall_seconds()
