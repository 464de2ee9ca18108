"""The Event Hub channel: ``EventHubConsumerClient`` on the collector's own consumer group,
partitions balanced and checkpointed in Blob Storage (``BlobCheckpointStore``), managed identity
for both. The asynchronous client (``azure.eventhub.aio``, a task per partition: none waits for
another's turn), with the synchronous credential and checkpoint store behind its interfaces
(``aio_bridge``); batches are parsed and committed on one worker thread, in the order they come.

Per batch of events of one partition: parse every body, commit the new rows to the outbox (one
transaction, duplicates dropped), wake the delivery workers, and only then move the partition's
checkpoint to the batch's last event. A crash between the two reads the batch again at the next
start; the writer drops what it had committed.

No message stalls a partition: each is read inside a boundary that turns any exception into one
log line and a count, and a message (or an event of it) that cannot be read or recorded is kept
aside in ``unreadable-messages.jsonl`` (bounded as the dead letters are) and checkpointed past
with the good events around it. Only a failure of the state directory itself leaves the
checkpoint where it was (the batch is read again: nothing is lost). How long each partition's
batch has been in hand, when the client last handed one over, and whether the checkpoint store
answers (probed every ``PROBE_EVERY`` seconds) go to status.json, where ``status`` judges a stall
(collector/status.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import sqlite3
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from azure.core.exceptions import AzureError
from azure.eventhub import LoadBalancingStrategy, TransportType
from azure.eventhub.aio import EventHubConsumerClient
from azure.eventhub.amqp import AmqpMessageBodyType
from azure.eventhub.extensions.checkpointstoreblob import BlobCheckpointStore

from .. import logs
from ..clock import Clock
from ..delivery.dead_letters import DeadLetters
from ..errors import StateError
from ..logs import one_line
from .aio_bridge import ThreadedCheckpointStore, ThreadedCredential, Workers
from .config import CollectorConfig
from .eventgrid import parse_body
from .record import PlatformRecord
from .stats import HubStats, PartitionStats
from .writer import Writer

log = logs.get("collector")
SET_ASIDE_FILE = "unreadable-messages.jsonl"  # in the state directory
KEPT_CHARS = 64 * 1024  # of a body or an event kept aside (its size is noted beside it)
PROBE_EVERY = 5.0  # seconds between probes of the checkpoint store
CHUNK_ROWS = 1000  # rows per commit within a batch (one event makes at most 1,000)
# The SDK's synchronous processor served its partitions in turn on one thread, an idle one holding
# it for the AMQP read timeout (0.2 s by default; 5 ms here), and handed a partition's batch over
# only when full or max_wait_time (1 s) after the last: with 38 partitions a notification took
# 0.87 s median, 1.38 s p90 (6.8 s and 18.8 s at the SDK's defaults). The asynchronous client
# serves each partition in a task of its own and hands events over as soon as they are read:
# 0.31 s median, 0.42 s p95 with 38 partitions, as with 2 (bench/collector_partitions.py).
SOCKET_TIMEOUT = 0.005  # the AMQP read timeout: a partition's reads stay brief on the loop
# How often an idle partition is handed an empty batch: its last_batch_at, which status's stall
# check (STALL_AFTER, 20 s) reads to see a partition the client stopped serving.
BATCH_WAIT = 0.05
CLOSE_WAIT = 10.0  # seconds close() waits for the client to release its partitions
Notification = tuple[str | None, list[PlatformRecord]]
STATE_FAILURES = (StateError, sqlite3.Error, OSError)  # the state directory's: read again


def _error_text(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {one_line(str(exc))}"


class HubChannel:
    def __init__(
        self,
        cfg: CollectorConfig,
        credential: Any,
        writer: Writer,
        notify: Callable[[], None],
        clock: Clock,
        set_aside: DeadLetters,
    ) -> None:
        self.cfg, self.writer, self.notify, self.clock = cfg, writer, notify, clock
        self.set_aside = set_aside
        self.stats = HubStats()
        self._closed = clock.event()
        blob_kw: dict[str, Any] = {}
        if cfg.checkpoint_ca_file:
            blob_kw["connection_verify"] = str(cfg.checkpoint_ca_file)
        self.checkpoints = BlobCheckpointStore(
            cfg.checkpoint_account_url, cfg.checkpoint_container, credential=credential, **blob_kw
        )
        self._loop: asyncio.AbstractEventLoop | None = None
        # one thread parses and commits every batch, in the order the partitions hand them over
        self._worker = ThreadPoolExecutor(1, thread_name_prefix="collector-batch")
        self._ended = clock.event()  # the event loop ended, or close() gave up on it
        self._error: BaseException | None = None
        workers = Workers()  # the blocking calls of the checkpoint store and the credential
        hub_kw: dict[str, Any] = {
            "checkpoint_store": ThreadedCheckpointStore(self.checkpoints, workers),
            "load_balancing_interval": cfg.load_balancing_interval,
            # claim every partition this collector's share allows at once, not one per interval
            # (balanced: 38 partitions took 38 intervals, 19 minutes at the default 30 s)
            "load_balancing_strategy": LoadBalancingStrategy.GREEDY,
            "socket_timeout": SOCKET_TIMEOUT,
        }
        if cfg.ownership_expiration:
            hub_kw["partition_ownership_expiration_interval"] = cfg.ownership_expiration
        if cfg.endpoint:  # an address of its own speaks AMQP (the SDK's default then: websockets)
            hub_kw["custom_endpoint_address"] = cfg.endpoint
            hub_kw["transport_type"] = TransportType.Amqp
        if cfg.ca_file:
            hub_kw["connection_verify"] = str(cfg.ca_file)
        self.client = EventHubConsumerClient(
            cfg.namespace,
            cfg.hub,
            cfg.consumer_group,
            ThreadedCredential(credential, workers),
            **hub_kw,
        )

    def run(self) -> None:
        """Receive until :meth:`close` (from another thread). The event loop runs on a thread
        of its own, so that a close the checkpoint store holds up (releasing the partitions)
        can be given up: the process then stops without waiting for Blob Storage's retries."""
        if self._closed.is_set():  # a stop request before the start
            return
        probe = threading.Thread(target=self._probe_loop, name="collector-probe", daemon=True)
        probe.start()
        receiver = threading.Thread(target=self._loop_main, name="collector-hub", daemon=True)
        receiver.start()
        self._ended.wait()
        self._worker.shutdown(wait=True)  # a batch in hand is committed; no other starts
        if self._error is not None:
            raise self._error

    def _loop_main(self) -> None:
        try:
            asyncio.run(self._receive())
        except BaseException as exc:  # raised in run(), on the thread that called it
            self._error = exc
        finally:
            self._ended.set()

    async def _receive(self) -> None:
        self._loop = asyncio.get_running_loop()
        if self._closed.is_set():  # close() saw no loop yet: nothing to stop but this
            return
        try:
            await self.client.receive_batch(
                on_event_batch=self._on_batch,
                on_error=self._on_error,
                on_partition_initialize=self._on_claimed,
                on_partition_close=self._on_released,
                max_batch_size=self.cfg.max_batch,
                max_wait_time=BATCH_WAIT,
                prefetch=self.cfg.prefetch,
                starting_position="-1",
            )
        finally:  # run() goes on; the loop's own ending (its tasks cancelled) may take longer
            self._ended.set()

    def close(self) -> None:
        """Stop receiving (any thread): returns once the client has closed, or after CLOSE_WAIT
        seconds when the checkpoint store holds it up (the client waits on it to release its
        partitions and to finish a claim); its partitions then expire, as after a crash."""
        self._closed.set()
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        deadline = self.clock.monotonic() + CLOSE_WAIT
        closing = asyncio.run_coroutine_threadsafe(self.client.close(), loop)
        with contextlib.suppress(Exception):  # timed out, or the loop ended: told below
            closing.result(CLOSE_WAIT)
        if not self.clock.wait(self._ended, max(0.0, deadline - self.clock.monotonic())):
            logs.event(
                log,
                logging.WARNING,
                f"Event Hub client not closed within {CLOSE_WAIT:g} s (the checkpoint store not "
                "answering); receiving stopped, its partitions left to expire",
            )
            self._ended.set()

    def _probe_loop(self) -> None:
        """Whether the checkpoint store answers, every PROBE_EVERY seconds: a store that is down
        or frozen shows even while no event comes to checkpoint. A frozen one blocks the probe:
        ``checkpoint_store_ok_at`` then ages, which is what ``status`` judges."""
        st = self.stats
        while True:
            try:
                self.checkpoints.list_ownership(
                    self.cfg.namespace, self.cfg.hub, self.cfg.consumer_group
                )
            except Exception as exc:  # any failure to answer is the finding
                error = _error_text(exc)
                if st.checkpoint_store_error is None:
                    logs.event(
                        log,
                        logging.WARNING,
                        "checkpoint store not answering; partitions cannot be balanced nor "
                        "checkpointed",
                        error=error,
                    )
                st.checkpoint_store_error = error
            else:
                if st.checkpoint_store_error is not None:
                    logs.event(log, logging.INFO, "checkpoint store answering again")
                st.checkpoint_store_error = None
                st.checkpoint_store_ok_at = self.clock.wall_seconds()
            if self.clock.wait(self._closed, PROBE_EVERY):
                return

    def _partition(self, ctx: Any) -> PartitionStats:
        return self.stats.by_partition.setdefault(str(ctx.partition_id), PartitionStats())

    async def _on_claimed(self, ctx: Any) -> None:
        part = self._partition(ctx)
        part.owned, part.last_batch_at = True, self.clock.wall_seconds()
        logs.event(log, logging.INFO, "partition claimed", partition=ctx.partition_id)

    async def _on_released(self, ctx: Any, reason: Any) -> None:
        self._partition(ctx).owned = False
        logs.event(
            log,
            logging.INFO,
            "partition released",
            partition=ctx.partition_id,
            reason=getattr(reason, "name", str(reason)),
        )

    async def _on_error(self, ctx: Any, exc: Exception) -> None:
        self.stats.receive_errors += 1
        self.stats.last_receive_error = f"{type(exc).__name__}: {one_line(str(exc))}"
        logs.event(
            log,
            logging.WARNING,
            "Event Hub receive failed; the client retries",
            partition=getattr(ctx, "partition_id", None),
            error=self.stats.last_receive_error,
        )

    async def _on_batch(self, ctx: Any, events: list[Any]) -> None:
        part = self._partition(ctx)
        part.last_batch_at = self.clock.wall_seconds()  # the client calls every BATCH_WAIT or so
        if not events:
            return
        part.busy_since = part.last_batch_at
        try:
            loop = asyncio.get_running_loop()
            await loop.run_in_executor(self._worker, self._take, ctx, events, part)
            await self._checkpoint(ctx, events[-1], part)
        finally:
            part.busy_since = None
            part.last_batch_at = self.clock.wall_seconds()

    def _take(self, ctx: Any, events: list[Any], part: PartitionStats) -> None:
        """Parse and commit a batch (the worker thread); the checkpoint follows on the loop."""
        now_ms = self.clock.wall_ms()
        read: list[tuple[Any, list[Notification]]] = []
        rows = 0
        for event in events:  # committed in chunks: rows of at most ~2 x CHUNK_ROWS in memory
            notifications = self._read(ctx, event, now_ms)
            read.append((event, notifications))
            rows += sum(len(r) for _, r in notifications)
            if rows >= CHUNK_ROWS:
                self._commit(ctx, read)
                read, rows = [], 0
        if read:
            self._commit(ctx, read)
        self.notify()
        last = events[-1]
        part.events += len(events)
        part.last_sequence_number = last.sequence_number
        if last.enqueued_time is not None:
            part.last_event_at = last.enqueued_time.timestamp()

    def _read(self, ctx: Any, event: Any, now_ms: int) -> list[Notification]:
        """One message's notifications; never raises: what cannot be read is counted, logged
        once and kept aside."""
        try:
            parsed = parse_body(_body(event), now_ms)
        except Exception as exc:  # the boundary: whatever a message does, the others go on
            self.stats.events += 1
            self.stats.parse_failures += 1
            self._keep_aside(ctx, event, f"cannot be read: {_error_text(exc)}", _raw(event))
            return []
        self.stats.add(parsed)
        if parsed.unreadable_body:
            self._keep_aside(ctx, event, parsed.problems[0], _raw(event))
            return []
        for problem, item in parsed.rejected:
            self._keep_aside(ctx, event, problem, item, what="event")
        for note in parsed.notes:
            logs.event(
                log,
                logging.WARNING,
                "platform event not recorded as served",
                partition=ctx.partition_id,
                sequence_number=event.sequence_number,
                detail=note[:300],
            )
        return parsed.notifications

    def _commit(self, ctx: Any, read: list[tuple[Any, list[Notification]]]) -> None:
        """The batch in one transaction; if a message's rows cannot be written (not the state
        directory: that failure leaves the checkpoint behind), message by message, and the one
        that fails is kept aside."""
        try:
            self.writer.write([n for _, ns in read for n in ns])
            return
        except STATE_FAILURES:
            raise  # no checkpoint: the batch is read again
        except Exception:
            pass  # one message's rows: find it below
        for event, notifications in read:
            try:
                self.writer.write(notifications)
            except STATE_FAILURES:
                raise
            except Exception as exc:
                self.stats.parse_failures += 1
                self._keep_aside(ctx, event, f"cannot be recorded: {_error_text(exc)}", _raw(event))

    def _keep_aside(
        self, ctx: Any, event: Any, reason: str, content: Any, what: str = "message"
    ) -> None:
        """One log line, a count, and the message (or event) in unreadable-messages.jsonl. A
        failure to write there is the state directory's: raised, so nothing is checkpointed."""
        self.stats.set_aside += 1
        text = content if isinstance(content, str) else _json_text(content)
        logs.event(
            log,
            logging.WARNING,
            f"unreadable platform {what} skipped; kept aside",
            partition=ctx.partition_id,
            sequence_number=event.sequence_number,
            error=reason[:300],
            file=str(self.set_aside.path),
        )
        try:
            self.set_aside.append(
                [
                    {
                        "partition": str(ctx.partition_id),
                        "sequence_number": event.sequence_number,
                        "offset": str(event.offset),
                        "what": what,
                        "reason": reason[:1000],
                        "chars": len(text),
                        "content": text[:KEPT_CHARS],
                    }
                ]
            )
        except OSError as exc:
            raise StateError(f"cannot keep an unreadable message aside: {exc}") from exc

    async def _checkpoint(self, ctx: Any, last: Any, part: PartitionStats) -> None:
        """After the commit. A failure leaves the checkpoint behind: the batch is read again
        after a restart or a move of the partition, and its rows dropped as duplicates."""
        st = self.stats
        try:
            await ctx.update_checkpoint(last)
        except AzureError as exc:
            st.checkpoint_failures += 1
            st.checkpoint_error = _error_text(exc)
            if st.checkpoint_failing_since is None:
                st.checkpoint_failing_since = self.clock.wall_seconds()
            logs.event(
                log,
                logging.WARNING,
                "checkpoint not saved; committed rows will be read again and dropped as duplicates",
                partition=ctx.partition_id,
                sequence_number=last.sequence_number,
                error=st.checkpoint_error,
            )
            return
        part.last_checkpoint_at = self.clock.wall_seconds()
        st.checkpoint_error = st.checkpoint_failing_since = None


def _body(event: Any) -> bytes | str:
    """A message's body as sent: bytes (Event Grid's), or the SDK's text of another AMQP body."""
    if event.body_type != AmqpMessageBodyType.DATA:
        return str(event.body_as_str())
    data = event.body
    return data if isinstance(data, bytes) else b"".join(data)


def _raw(event: Any) -> str:
    """What is kept of a message that cannot be read: its text, bytes that are not UTF-8 as
    escapes."""
    try:
        body = _body(event)
    except Exception as exc:
        return f"<body not readable: {_error_text(exc)}>"
    if isinstance(body, bytes):
        return body[: 4 * KEPT_CHARS].decode("utf-8", "backslashreplace")
    return body


def _json_text(value: Any) -> str:
    try:
        return json.dumps(value, ensure_ascii=True)
    except (ValueError, TypeError, RecursionError):
        return repr(value)[:KEPT_CHARS]
