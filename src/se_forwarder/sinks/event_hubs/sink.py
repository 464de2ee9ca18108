"""Event Hubs through ``azure-eventhub`` (``EventHubProducerClient``), public API only.

Messages follow record-contract §4: one event per record, body = the record's JSON (UTF-8),
``content_type`` ``application/json``, application properties ``Phase``, ``EventType`` (records)
and ``Table`` (``ScheduledEvents`` / ``ScheduledEventsAgent``), partition key = the row's partition
key (VmId, or Computer when unknown), so one VM's records stay in order. ``Phase`` and
``EventType`` come from the outbox row (written at commit): no record is parsed here.

A worker batch goes out as ``EventDataBatch`` transfers made with ``create_batch(partition_key=…)``,
whose ``max_size_in_bytes`` is what the service announced on the link (1 MB Standard, 256 KB
Basic). The worker's limits are fixed when the sink is built (800 KB a batch: one transfer on a
Standard hub); a batch that does not fit one transfer (a Basic hub, several partition keys) goes
out as several, in order. When a later transfer fails after earlier ones were Accepted, ``send``
returns what was delivered (a ``SendResult`` whose ``failure`` is the rest's): the worker
acknowledges that prefix and retries the rest, so delivery progress has one owner (the outbox
cursor) and a partial failure duplicates nothing already confirmed.

Retries belong to the delivery worker: the SDK's own retry is off (``retry_total=0``). The SDK
would retry connection errors with its fixed backoff, inside ``send_batch`` where a stop request
cannot interrupt it, and does not back off at all on a rejected delivery. Answers: the SDK's
public exception classes and the AMQP condition it keeps in ``EventHubError.error``, read through
``ANSWERS`` (the shared mechanism of ``answers.py``); after any of them the producer is rebuilt:

* Accepted: delivered. Rejected ``com.microsoft:server-busy``, ``amqp:internal-error``, other
  rejections, dropped connections, timeouts, connection errors: retried.
* Rejected ``amqp:link:message-size-exceeded``: split by the worker. Rejected
  ``com.microsoft:argument-error``: the record is refused for good (isolated, dead-lettered).
* The token refused (the CBS ``put-token`` answered 401): a new credential, then again at once.
  The attach refused (``amqp:unauthorized-access``: no Send claim), or no token at all: the slow
  schedule and an error line naming **Azure Event Hubs Data Sender** on the hub. A connection
  string's key refused: the slow schedule (there is nothing to renew).
* ``amqp:not-found`` (no such hub): the slow schedule and an error line.

With a backlog the worker hands the sink its next batch (``prepare``) while this one is being
sent: the events are encoded into ``EventDataBatch``es (the SDK's public constructor, sized to
the link as announced) while the sink waits for the service's answer, and ``send`` sends those
when the batch is the one prepared and the link still announces that size (else it builds them
as always). At most two batches are held prepared (the next, and the one being sent when the
next was prepared before its send began).

What the peer can make the sink read is bounded (``peer_bound.py``, through the SDK's public
``ssl_context``): AMQP frames of at most 1 MiB, and each transfer within ``timeout`` + 1 s however
the peer answers (or does not).

The connection string (from a file or an environment variable) is never logged.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

# The SDK is imported here only: this module is imported only when the sink is configured.
from azure.core.exceptions import ClientAuthenticationError
from azure.eventhub import EventDataBatch, EventHubProducerClient, TransportType
from azure.eventhub.amqp import AmqpAnnotatedMessage, AmqpMessageProperties
from azure.eventhub.exceptions import (
    AuthenticationError,
    ClientClosedError,
    ConnectError,
    ConnectionLostError,
    EventDataError,
    EventDataSendError,
    EventHubError,
    OperationTimeoutError,
)

from ... import contract, logs
from ...clock import SYSTEM, Clock
from ...errors import Verdict
from ...identity import credential
from ...logs import one_line
from ..answers import SOCKET, Answer, Meaning, Reaction, Reactions, verdict
from ..base import BatchLimits, DeliveryError, OutboxRow, SendResult, Sink, SinkContext
from .config import EventHubsSinkConfig
from .peer_bound import PeerBound

ROLE = "Azure Event Hubs Data Sender"
DEFAULT_LINK_BYTES = 1024 * 1024  # the SDK's fallback; Standard tier
# A transfer's deadline past ``timeout`` (peer_bound.py), so the SDK's own send timeout answers
# first when the link is up; the deadline ends what it does not cover (open, SASL, a trickle).
DEADLINE_MARGIN = 1.0
EVENT_OVERHEAD = 320  # AMQP bytes around one record in a batch (header, properties, partition key)
CONTENT_TYPE = "application/json"
# The AMQP message annotation that carries an event's partition key (Event Hubs' AMQP mapping).
PARTITION_KEY = b"x-opt-partition-key"
# An event is its record and ~200 bytes (annotations, properties, sections; measured by
# bench/sink_throughput.py: 1.2 KB records, 810 KB transfers of 700 KB): 800 KB of records of
# 600 bytes or more fill one 1 MB transfer.
DEFAULT_LIMITS = BatchLimits(
    max_records=2000,
    max_bytes=800_000,
    linger_seconds=1.0,
    max_record_bytes=DEFAULT_LINK_BYTES - EVENT_OVERHEAD - 1024,
)
ANSWERS = SOCKET.extend(
    {
        # The AMQP condition of a rejection or a refused link, as the SDK keeps it in
        # ``EventHubError.error`` (the condition after its namespace: com.microsoft:server-busy).
        "server-busy": Meaning.THROTTLED,
        "resource-limit-exceeded": Meaning.THROTTLED,
        "timeout": Meaning.NO_ANSWER,
        "internal-error": Meaning.SERVER_ERROR,
        "link:message-size-exceeded": Meaning.TOO_LARGE,
        "argument-error": Meaning.REFUSED,
        "argument-out-of-range": Meaning.REFUSED,
        "unauthorized-access": Meaning.NOT_AUTHORISED,  # no Send claim on the hub
        "not-found": Meaning.NOT_FOUND,
        "entity-disabled": Meaning.NOT_FOUND,
        # The SDK's public exception classes, the most specific first (httpx's rule).
        ClientAuthenticationError: Meaning.NO_TOKEN,  # azure-identity could not get a token
        AuthenticationError: Meaning.TOKEN_REFUSED,  # the CBS put-token answered 401
        OperationTimeoutError: Meaning.NO_ANSWER,
        ConnectionLostError: Meaning.NOT_REACHED,
        ConnectError: Meaning.NOT_REACHED,
        ClientClosedError: Meaning.NOT_REACHED,
        EventDataError: Meaning.REFUSED,  # the SDK itself refuses the event
        EventDataSendError: Meaning.SERVER_ERROR,  # a rejection with a condition not named above
        EventHubError: Meaning.SERVER_ERROR,
    }
)


def read_answer(exc: Exception) -> Answer:
    """The condition and the exception, from the SDK's public fields (a token azure-identity
    could not get is the cause of the SDK's error: that cause is the answer)."""
    cause: BaseException | None = exc
    for _ in range(6):
        if cause is None:
            break
        if isinstance(cause, ClientAuthenticationError):
            return Answer.of(cause)
        cause = cause.__cause__ or cause.__context__
    code = exc.error if isinstance(exc, EventHubError) else None
    return Answer(code=code, error=exc, text=one_line(str(exc)))


# EventData.properties as the SDK types it
_Properties = dict[str | bytes, Any]
PREPARED_BATCHES = 2  # held at most: the next batch, and the one about to be sent


@dataclass(frozen=True, slots=True)
class _Transfer:
    """An ``EventDataBatch`` holding ``batch[start:end]``."""

    start: int
    end: int
    edb: EventDataBatch


@dataclass(frozen=True, slots=True)
class _Prepared:
    """A worker batch's transfers, built ahead (all of them, or a prefix)."""

    rows: tuple[OutboxRow, ...]
    transfers: list[_Transfer]

    def of(self, batch: Sequence[OutboxRow]) -> bool:
        """Built for exactly these rows (the same objects: a batch split or retried is not)."""
        return len(batch) == len(self.rows) and all(
            a is b for a, b in zip(batch, self.rows, strict=True)
        )


class EventHubsSink(Sink):
    name = "event_hubs"
    tables = frozenset(contract.tables())

    def __init__(
        self,
        hub: str,
        *,
        namespace: str = "",
        credential: Any = None,
        connection_string: str | None = None,
        endpoint: str = "",
        ca_file: str | None = None,
        timeout: float = 30.0,
        identity_name: str = "the agent's identity",
        limits: BatchLimits = DEFAULT_LIMITS,
        renew_credential: Callable[[], Any] | None = None,
        logger: logging.Logger | None = None,
        clock: Clock = SYSTEM,
    ) -> None:
        if connection_string is None and (credential is None or not namespace):
            raise ValueError("Event Hubs needs namespace + credential, or a connection string")
        self.hub = hub
        self.namespace = namespace
        self.limits = limits
        self.timeout = timeout
        self.identity_name = (
            identity_name if connection_string is None else "the connection string's policy"
        )
        self.log = logger or logs.get("sink.event_hubs")
        self._credential = credential
        self._renew_credential = renew_credential
        self._conn_str = connection_string
        self._kwargs: dict[str, Any] = {"retry_total": 0, "auth_timeout": timeout}
        if endpoint:
            self._kwargs["custom_endpoint_address"] = endpoint
            self._kwargs["transport_type"] = TransportType.Amqp
        # what the peer can make us read: frames within the SDK's own proposal, a send within
        # ``timeout`` however the peer answers (peer_bound.py; the context replaces
        # ``connection_verify``, with the same CA file)
        self.bound = PeerBound(timeout + DEADLINE_MARGIN, clock=clock)
        self._kwargs["ssl_context"] = self.bound.context(str(ca_file) if ca_file else None)
        self._producer: EventHubProducerClient | None = None
        self._link_bytes = 0  # the link's announced maximum message size, once seen (logged)
        # Application properties per (table, Phase, EventType): built once, shared by events.
        self._props: dict[tuple[str, str | None, str | None], _Properties] = {}
        self._prepared: list[_Prepared] = []  # built ahead by ``prepare`` (another thread)
        self._prepared_lock = threading.Lock()
        logging.getLogger("azure.eventhub").setLevel(logging.WARNING)
        logging.getLogger("azure.identity").setLevel(logging.ERROR)  # we log token failures once

    @classmethod
    def from_config(cls, cfg: EventHubsSinkConfig, cx: SinkContext) -> EventHubsSink:
        conn = cfg.connection_string()
        identity_cfg, clock = cx.identity, cx.clock
        common: dict[str, Any] = {
            "logger": cx.log("sink.event_hubs"),
            "clock": clock,
            "namespace": cfg.namespace,
            "endpoint": cfg.endpoint,
            "ca_file": str(cfg.ca_file) if cfg.ca_file else None,
            "timeout": cfg.timeout,
            "limits": cfg.limits(DEFAULT_LIMITS),
        }
        if conn is not None:
            return cls(cfg.hub, connection_string=conn, **common)
        return cls(
            cfg.hub,
            credential=credential.build(identity_cfg, clock=clock),
            identity_name=credential.describe(identity_cfg),
            renew_credential=lambda: credential.build(identity_cfg, clock=clock),
            **common,
        )

    # -- the interface ------------------------------------------------------------------------

    def reject_reason(self, row: OutboxRow) -> str | None:
        return None  # the size is the worker's rule (``max_record_bytes``); nothing else refuses

    def prepare(self, batch: Sequence[OutboxRow]) -> None:
        """The batch's transfers built now (see the module's docstring), once the link has said
        what it takes; nothing is sent or opened here."""
        size = self._link_bytes
        if not size or not batch:
            return
        transfers: list[_Transfer] = []
        start = 0
        while start < len(batch):
            edb = EventDataBatch(max_size_in_bytes=size, partition_key=batch[start].partition_key)
            end = self._fill(edb, batch, start)
            if end == start:  # a record no transfer can carry: ``send`` says so
                break
            transfers.append(_Transfer(start, end, edb))
            start = end
        with self._prepared_lock:
            self._prepared = [
                *self._prepared[1 - PREPARED_BATCHES :],
                _Prepared(tuple(batch), transfers),
            ]

    def send(self, batch: Sequence[OutboxRow]) -> SendResult:
        result = SendResult()
        self.bound.problem = None
        ready = self._take_prepared(batch)
        try:
            with ANSWERS.mapped(read_answer, self._react):
                producer = self._client()
                while result.delivered < len(batch):
                    result = self._transfer(producer, batch, result, ready)
        except DeliveryError as exc:
            return result.rest_failed(exc)
        return result

    def close(self) -> None:
        with self._prepared_lock:
            self._prepared = []
        self._reset()
        if self._credential is not None:
            with contextlib.suppress(Exception):
                self._credential.close()

    # -- internals ----------------------------------------------------------------------------

    def _take_prepared(self, batch: Sequence[OutboxRow]) -> list[_Transfer]:
        """The transfers ``prepare`` built for this very batch (taken: a retry builds anew)."""
        with self._prepared_lock:
            for i, prepared in enumerate(self._prepared):
                if prepared.of(batch):
                    del self._prepared[i]
                    return list(prepared.transfers)
        return []

    def _transfer(
        self,
        producer: EventHubProducerClient,
        batch: Sequence[OutboxRow],
        result: SendResult,
        ready: list[_Transfer],
    ) -> SendResult:
        """Send one ``EventDataBatch`` of consecutive rows with one partition key, from the first
        row ``result`` has not delivered (the one prepared for them, if ``ready`` has it);
        returns ``result`` with that transfer added."""
        with self.bound.sending():
            return self._transfer_within(producer, batch, result, ready)

    def _transfer_within(
        self,
        producer: EventHubProducerClient,
        batch: Sequence[OutboxRow],
        result: SendResult,
        ready: list[_Transfer],
    ) -> SendResult:
        start = result.delivered
        edb = producer.create_batch(partition_key=batch[start].partition_key)  # opens the link
        self._learn_link(edb.max_size_in_bytes)
        if (
            ready
            and ready[0].start == start
            and ready[0].edb.max_size_in_bytes == edb.max_size_in_bytes
        ):
            edb, end = ready[0].edb, ready[0].end
            del ready[0]
        else:
            ready.clear()
            end = self._fill(edb, batch, start)
            if end == start:  # a single record the link can never carry: no retry helps
                row = batch[start]
                raise DeliveryError(
                    f"record seq {row.seq} ({row.size} bytes) does not fit an "
                    f"Event Hubs message of {edb.max_size_in_bytes} bytes",
                    Verdict.REJECT,
                )
        producer.send_batch(edb, timeout=self.timeout)
        return result.plus(end - start, edb.size_in_bytes)

    def _fill(self, edb: EventDataBatch, batch: Sequence[OutboxRow], start: int) -> int:
        """Add the rows from ``start`` with the batch's partition key while they fit; the index
        of the first row left out."""
        key = batch[start].partition_key
        end = start
        while end < len(batch) and batch[end].partition_key == key:
            try:
                edb.add(self._event(batch[end]))
            except ValueError:
                break
            end += 1
        return end

    def _client(self) -> EventHubProducerClient:
        if self._producer is None:
            if self._conn_str is not None:
                self._producer = EventHubProducerClient.from_connection_string(
                    self._conn_str, eventhub_name=self.hub, **self._kwargs
                )
            else:
                self._producer = EventHubProducerClient(
                    self.namespace, self.hub, self._credential, **self._kwargs
                )
        return self._producer

    def _reset(self) -> None:
        producer, self._producer = self._producer, None
        if producer is not None:
            with contextlib.suppress(Exception):
                producer.close()

    def _learn_link(self, size: int) -> None:
        """Say once what the link takes (the limits stay as built: a batch larger than one
        transfer goes out as several)."""
        if size and size != self._link_bytes:
            self._link_bytes = size
            logs.event(
                self.log,
                logging.INFO,
                "Event Hubs link ready",
                hub=self.hub,
                max_message_size=size,
                batch_bytes=self.limits.max_bytes,
            )

    def _event(self, row: OutboxRow) -> AmqpAnnotatedMessage:
        """The record as the AMQP message ``EventData`` would make of it (the same bytes on the
        wire), built in one call: ``EventData`` builds a message and sets content type and
        properties through setters, then the batch copies it to add the partition key; that
        cost ~15 % more per event than this (bench/sink_throughput.py, ``add`` alone)."""
        return AmqpAnnotatedMessage(
            data_body=row.payload.encode("utf-8"),
            annotations={PARTITION_KEY: row.partition_key} if row.partition_key else {},
            # the SDK's documented keyword (its __init__ is not annotated)
            properties=AmqpMessageProperties(content_type=CONTENT_TYPE),  # type: ignore[no-untyped-call]
            application_properties=self._properties(row),
        )

    def _properties(self, row: OutboxRow) -> _Properties:
        key = (row.table, row.phase, row.event_type)
        props: _Properties | None = self._props.get(key)
        if props is None:
            props = {"Table": contract.table(row.table).short_name}
            if row.phase is not None:
                props["Phase"] = row.phase
            if row.event_type is not None:
                props["EventType"] = row.event_type
            if row.table == contract.RECORDS and row.phase is None:
                props = {**props, **_routing_from_payload(row.payload)}
            else:
                self._props[key] = props
        return props

    def _react(self, answer: Answer, meaning: Meaning) -> DeliveryError:
        """The side effects of a failed send (a new producer; a new credential when it was
        refused) and its error, worded (and logged when a person must act) by ``REACTIONS``."""
        self._reset()
        said, code = answer.text, answer.code or type(answer.error).__name__
        if self.bound.problem is not None:  # the connection was closed here: say why
            meaning = (
                Meaning.NO_ANSWER
                if self.bound.problem.startswith("no answer")
                else Meaning.NOT_REACHED
            )
            said = self.bound.problem
        renewed = meaning.renews and self._renew()
        words = {
            "meaning": meaning,
            "code": code,
            "said": said,
            "identity": self.identity_name,
            "role": ROLE,
            "hub": self.hub,
            "namespace": self.namespace,
            "renewed": renewed,
        }
        message = REACTIONS.say(meaning, answer, words, self.log)
        return DeliveryError(message, verdict(meaning, renewed=renewed))

    def _renew(self) -> bool:
        """A new credential (a fresh token) for the next producer; False when there is none to
        get (a connection string)."""
        if self._renew_credential is None:
            return False
        old, self._credential = self._credential, self._renew_credential()
        with contextlib.suppress(Exception):
            old.close()
        return True


_REFUSED_IDENTITY = Reaction(
    "Event Hubs refused the identity ({meaning}): {said} -- "
    "{identity} needs the '{role}' role on the event hub {hub}",
    (logging.ERROR, "Event Hubs refused the identity; will retry"),
    {"hub": "hub", "role": "role", "identity": "identity", "error": "said", "renewed": "renewed"},
)
# What the sink says, and logs once, for an answer that needs a person's attention.
REACTIONS = Reactions(
    {
        Meaning.TOKEN_REFUSED: _REFUSED_IDENTITY,
        Meaning.NOT_AUTHORISED: _REFUSED_IDENTITY,
        Meaning.NO_TOKEN: _REFUSED_IDENTITY,
        Meaning.NOT_FOUND: Reaction(
            "Event Hubs: no such hub ({code}): {said} -- check namespace and hub {hub}",
            (logging.ERROR, "Event Hubs: hub not found; will retry slowly"),
            {"hub": "hub", "namespace": "namespace", "error": "said"},
        ),
    },
    answered=Reaction("Event Hubs {meaning} ({code}): {said}"),
    unanswered=Reaction("Event Hubs {meaning} ({code}): {said}"),
)


def _routing_from_payload(payload: str) -> _Properties:
    """Phase and EventType of a record spooled by an older agent (no routing columns)."""
    import json

    try:
        rec = json.loads(payload)
    except ValueError:
        return {}
    if not isinstance(rec, dict):
        return {}
    return {k: rec[k] for k in ("Phase", "EventType") if isinstance(rec.get(k), str)}
