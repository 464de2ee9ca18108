"""Event Hubs through ``azure-eventhub`` (``EventHubProducerClient``), public API only.

Messages follow record-contract §4: one event per record, body = the record's JSON (UTF-8),
``content_type`` ``application/json``, application properties ``Phase``, ``EventType`` (records)
and ``Table`` (``ScheduledEvents`` / ``ScheduledEventsAgent``), partition key = the row's partition
key (VmId, or Computer when unknown), so one VM's records stay in order. ``Phase`` and
``EventType`` come from the outbox row (written at commit): no record is parsed here.

A worker batch goes out as ``EventDataBatch`` transfers made with ``create_batch(partition_key=…)``,
whose ``max_size_in_bytes`` is what the service announced on the link (1 MB Standard, 256 KB
Basic). A worker batch normally fits one transfer (the worker's byte limit is fitted to the link
once it is known); if it does not, the sink sends several in order. When a later transfer fails
after earlier ones were Accepted, the sink raises ``PartialDelivery`` carrying the last delivered
seq: the worker acknowledges that prefix and retries the rest, so delivery progress has one owner
(the outbox cursor) and a partial failure duplicates nothing already confirmed.

Retries belong to the delivery worker: the SDK's own retry is off (``retry_total=0``). The SDK
would retry connection errors with its fixed backoff, inside ``send_batch`` where a stop request
cannot interrupt it, and does not back off at all on a rejected delivery. Answers:

* Accepted: delivered.
* Rejected ``com.microsoft:server-busy`` and other rejections, dropped connections, timeouts,
  connection errors: ``RetryableError`` (the producer is rebuilt before the next try).
* Rejected ``amqp:link:message-size-exceeded``: ``BatchTooLarge`` (the worker splits).
* Refused token or attach (``amqp:unauthorized-access``), no token at all:
  ``RetryableError(slow=True)`` and an error line naming **Azure Event Hubs Data Sender** on the hub.

The connection string (from a file or an environment variable) is never logged.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

# The SDK is imported here only: this module is imported only when the sink is configured.
from azure.core.exceptions import ClientAuthenticationError
from azure.eventhub import EventData, EventHubProducerClient, TransportType
from azure.eventhub.exceptions import (
    AuthenticationError,
    EventDataSendError,
    EventHubError,
)

from ... import contract, logs
from ...config import IdentityConfig
from .. import credential
from ..base import (
    BatchLimits,
    BatchRejected,
    BatchTooLarge,
    OutboxRow,
    PartialDelivery,
    RetryableError,
)
from .config import EventHubsSinkConfig

ROLE = "Azure Event Hubs Data Sender"
DEFAULT_LINK_BYTES = 1024 * 1024  # the SDK's fallback; Standard tier
EVENT_OVERHEAD = 320  # AMQP bytes around one record in a batch (header, properties, partition key)
CONTENT_TYPE = "application/json"
DEFAULT_LIMITS = BatchLimits(max_records=2000, max_bytes=700_000, linger_seconds=1.0,
                             max_record_bytes=DEFAULT_LINK_BYTES - EVENT_OVERHEAD - 1024)


class EventHubsSink:
    name = "event_hubs"
    tables = frozenset(contract.tables())

    def __init__(self, hub: str, *, namespace: str = "", credential: Any = None,
                 connection_string: str | None = None, endpoint: str = "",
                 ca_file: str | None = None, timeout: float = 30.0,
                 identity_name: str = "the agent's identity",
                 limits: BatchLimits = DEFAULT_LIMITS,
                 renew_credential: Callable[[], Any] | None = None,
                 logger: logging.Logger | None = None) -> None:
        if connection_string is None and (credential is None or not namespace):
            raise ValueError("Event Hubs needs namespace + credential, or a connection string")
        self.hub = hub
        self.namespace = namespace
        self.limits = limits
        self._configured_max_bytes = limits.max_bytes
        self.timeout = timeout
        self.identity_name = identity_name if connection_string is None else "the connection string's policy"
        self.log = logger or logs.get("sink.event_hubs")
        self._credential = credential
        self._renew_credential = renew_credential
        self._conn_str = connection_string
        self._kwargs: dict[str, Any] = {"retry_total": 0, "auth_timeout": timeout}
        if endpoint:
            self._kwargs["custom_endpoint_address"] = endpoint
            self._kwargs["transport_type"] = TransportType.Amqp
        if ca_file:
            self._kwargs["connection_verify"] = str(ca_file)
        self._producer: EventHubProducerClient | None = None
        self._link_bytes: int | None = None
        # Application properties per (table, Phase, EventType): built once, shared by events.
        self._props: dict[tuple[str, str | None, str | None], dict[str, str]] = {}
        logging.getLogger("azure.eventhub").setLevel(logging.WARNING)
        logging.getLogger("azure.identity").setLevel(logging.ERROR)  # we log token failures once
        self.requests = 0  # transfers made
        self.events_sent = 0
        self.max_transfer_bytes = 0
        self.bytes_sent = 0

    @classmethod
    def from_config(cls, cfg: EventHubsSinkConfig, identity_cfg: IdentityConfig) -> EventHubsSink:
        conn = cfg.connection_string()
        common: dict[str, Any] = {"namespace": cfg.namespace, "endpoint": cfg.endpoint,
                                  "ca_file": str(cfg.ca_file) if cfg.ca_file else None,
                                  "timeout": cfg.timeout, "limits": cfg.limits(DEFAULT_LIMITS)}
        if conn is not None:
            return cls(cfg.hub, connection_string=conn, **common)
        return cls(cfg.hub, credential=credential.build(identity_cfg),
                   identity_name=credential.describe(identity_cfg),
                   renew_credential=lambda: credential.build(identity_cfg), **common)

    # -- the interface ------------------------------------------------------------------------

    def reject_reason(self, row: OutboxRow) -> str | None:
        link = self._link_bytes or DEFAULT_LINK_BYTES
        if row.size + EVENT_OVERHEAD > link:
            return (f"record of {row.size} bytes can never fit an Event Hubs message "
                    f"(the hub takes at most {link} bytes)")
        return None

    def send(self, batch: Sequence[OutboxRow]) -> None:
        done = 0  # rows of this batch the service accepted
        try:
            producer = self._client()
            while done < len(batch):
                done += self._transfer(producer, batch, done)
        except (BatchTooLarge, BatchRejected, RetryableError) as exc:
            raise self._partial(batch, done, exc) from None
        except (AuthenticationError, ClientAuthenticationError) as exc:
            self._reset()
            raise self._partial(batch, done, self._auth_error(exc)) from None
        except EventDataSendError as exc:
            self._reset()
            condition = _condition(exc)
            if condition == "amqp:link:message-size-exceeded":
                err: Exception = BatchTooLarge(f"Event Hubs rejected the batch as too large: {_text(exc)}")
            else:
                err = RetryableError(f"Event Hubs rejected the delivery ({condition or 'rejected'}): "
                                     f"{_text(exc)}")
            raise self._partial(batch, done, err) from None
        except EventHubError as exc:
            self._reset()
            if _condition(exc) == "amqp:unauthorized-access" or _caused_by(exc, ClientAuthenticationError):
                raise self._partial(batch, done, self._auth_error(exc)) from None
            raise self._partial(batch, done, RetryableError(
                f"Event Hubs not reached ({type(exc).__name__}): {_text(exc)}")) from None
        except (OSError, TimeoutError) as exc:
            self._reset()
            raise self._partial(batch, done, RetryableError(
                f"Event Hubs not reached ({type(exc).__name__}): {_text(exc)}")) from None

    def close(self) -> None:
        self._reset()
        if self._credential is not None:
            try:
                self._credential.close()
            except Exception:  # noqa: BLE001, S110 - closing on the way out: nothing to do about it
                pass

    # -- internals ----------------------------------------------------------------------------

    def _transfer(self, producer: EventHubProducerClient, batch: Sequence[OutboxRow],
                  start: int) -> int:
        """Send one ``EventDataBatch`` of consecutive rows with one partition key, starting at
        ``start``; returns how many rows it carried."""
        key = batch[start].partition_key
        edb = producer.create_batch(partition_key=key)
        self._learn_link(edb.max_size_in_bytes)
        end = start
        while end < len(batch) and batch[end].partition_key == key:
            try:
                edb.add(self._event(batch[end]))
            except ValueError:
                if end == start:  # a single record the link can never carry: no retry helps
                    row = batch[end]
                    raise BatchRejected(f"record seq {row.seq} ({row.size} bytes) does not fit an "
                                        f"Event Hubs message of {edb.max_size_in_bytes} bytes") from None
                break
            end += 1
        producer.send_batch(edb, timeout=self.timeout)
        self.requests += 1
        self.events_sent += end - start
        self.bytes_sent += edb.size_in_bytes
        self.max_transfer_bytes = max(self.max_transfer_bytes, edb.size_in_bytes)
        return end - start

    @staticmethod
    def _partial(batch: Sequence[OutboxRow], done: int, exc: Exception) -> Exception:
        """``exc`` for the rest of the batch, carrying how far it got when a prefix was Accepted."""
        if done and isinstance(exc, (BatchTooLarge, BatchRejected, RetryableError)):
            return PartialDelivery(batch[done - 1].seq, exc)
        return exc

    def _client(self) -> EventHubProducerClient:
        if self._producer is None:
            if self._conn_str is not None:
                self._producer = EventHubProducerClient.from_connection_string(
                    self._conn_str, eventhub_name=self.hub, **self._kwargs)
            else:
                self._producer = EventHubProducerClient(self.namespace, self.hub, self._credential,
                                                        **self._kwargs)
        return self._producer

    def _reset(self) -> None:
        producer, self._producer = self._producer, None
        if producer is not None:
            try:
                producer.close()
            except Exception:  # noqa: BLE001, S110 - closing on the way out: nothing to do about it
                pass

    def _learn_link(self, size: int) -> None:
        """Once the link announced its maximum message size, fit the worker's batches to it."""
        if size and size != self._link_bytes:
            self._link_bytes = size
            # Records are ~30 % smaller than their AMQP form; keep one worker batch in one transfer.
            fit = max(1024, int(size * 0.7))
            self.limits = BatchLimits(
                max_records=self.limits.max_records, max_bytes=min(self._configured_max_bytes, fit),
                linger_seconds=self.limits.linger_seconds,
                max_record_bytes=max(1, size - EVENT_OVERHEAD - 1024))
            logs.event(self.log, logging.INFO, "Event Hubs link ready", hub=self.hub,
                       max_message_size=size, batch_bytes=self.limits.max_bytes)

    def _event(self, row: OutboxRow) -> EventData:
        event = EventData(row.payload.encode("utf-8"))
        event.content_type = CONTENT_TYPE
        event.properties = self._properties(row)
        return event

    def _properties(self, row: OutboxRow) -> dict[str, str]:
        key = (row.table, row.phase, row.event_type)
        props = self._props.get(key)
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

    def _auth_error(self, exc: BaseException) -> RetryableError:
        """Refused (a missing role, or a token it no longer takes: AMQP does not tell them
        apart): the next attempt gets a fresh token, on the slow schedule (at least every
        minute)."""
        if self._renew_credential is not None:
            old, self._credential = self._credential, self._renew_credential()
            try:
                old.close()
            except Exception:  # noqa: BLE001, S110 - closing what is replaced: nothing to do
                pass
        msg = (f"Event Hubs refused the identity: {_text(exc)} -- {self.identity_name} needs the "
               f"'{ROLE}' role on the event hub {self.hub}")
        logs.event(self.log, logging.ERROR, "Event Hubs refused the identity; will retry slowly",
                   hub=self.hub, role=ROLE, identity=self.identity_name, error=_text(exc))
        return RetryableError(msg, slow=True)


def _routing_from_payload(payload: str) -> dict[str, str]:
    """Phase and EventType of a record spooled by an older agent (no routing columns)."""
    import json
    try:
        rec = json.loads(payload)
    except ValueError:
        return {}
    if not isinstance(rec, dict):
        return {}
    return {k: rec[k] for k in ("Phase", "EventType") if isinstance(rec.get(k), str)}


def _condition(exc: BaseException) -> str | None:
    """The AMQP error condition behind an SDK exception (``com.microsoft:server-busy``…): from
    the AMQP exception it was raised from, else the suffix the SDK keeps in ``exc.error``."""
    cur: BaseException | None = exc
    for _ in range(6):
        if cur is None:
            break
        cond = getattr(cur, "condition", None)
        if cond is not None:
            value = getattr(cond, "value", cond)
            return value.decode() if isinstance(value, bytes) else str(value)
        cur = cur.__cause__ or cur.__context__
    suffix = getattr(exc, "error", None)
    if isinstance(suffix, str) and suffix:
        return {"server-busy": "com.microsoft:server-busy",
                "link:message-size-exceeded": "amqp:link:message-size-exceeded",
                "unauthorized-access": "amqp:unauthorized-access"}.get(suffix, suffix)
    return None


def _caused_by(exc: BaseException, kind: type) -> bool:
    cur: BaseException | None = exc
    for _ in range(6):
        if cur is None:
            return False
        if isinstance(cur, kind):
            return True
        cur = cur.__cause__ or cur.__context__
    return False


def _text(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:300]
