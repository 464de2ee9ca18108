"""Event Hubs through ``azure-eventhub`` (``EventHubProducerClient``, the pure-Python AMQP transport).

Messages follow record-contract §4: one event per record, body = the record's JSON (UTF-8),
``content_type`` ``application/json``, application properties ``Phase``, ``EventType`` (records)
and ``Table`` (``ScheduledEvents`` / ``ScheduledEventsAgent``), partition key = the outbox item's
partition key (VmId, or Computer when unknown), so one VM's records stay in order.

A worker batch goes out as ``EventDataBatch`` transfers made with ``create_batch(partition_key=…)``,
whose size limit is the one the service announced on the link (1 MB Standard, 256 KB Basic). A
worker batch normally fits one transfer (the worker's byte limit is set from the link size once
it is known); if it does not, the sink sends several in order. A transfer the service settled
as Accepted is delivered: when a later transfer of the same batch fails, the sink remembers how
far the batch got, and the retry of that batch starts after it, so a partial failure does not
duplicate what was already confirmed.

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

Speed: the SDK's ``EventDataBatch.add`` encodes every event twice in pure Python (once to size
it, once to store it), about 3,700 of our events per second on this machine, too slow for a
backlog. The sink therefore encodes each event itself, once (:func:`encode_event`: header,
partition-key annotation, content type, application properties, one Data section; the same
bytes the SDK produces) and appends it to the ``EventDataBatch`` with the same size accounting
as ``add``. Before using that path, a sink checks once that its bytes equal the SDK's own
encoding of a real record; if they differ (another SDK version, tracing switched on) it uses
``EventDataBatch.add`` instead and says so in the log.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

# The SDK is imported here only: this module is imported only when the sink is configured.
from azure.core.exceptions import ClientAuthenticationError
from azure.eventhub import EventData, EventHubProducerClient, TransportType
from azure.eventhub.exceptions import (
    AuthenticationError,
    EventDataSendError,
    EventHubError,
)

from .. import identity, logs
from ..config import EventHubsSinkConfig, IdentityConfig
from .base import BatchLimits, BatchTooLarge, OutboxItem, RetryableError

ROLE = "Azure Event Hubs Data Sender"
DEFAULT_LINK_BYTES = 1024 * 1024  # the SDK's fallback; Standard tier
EVENT_OVERHEAD = 320  # AMQP bytes around one record in a batch (header, properties, partition key)
TABLE_NAMES = {"records": "ScheduledEvents", "heartbeats": "ScheduledEventsAgent"}
DEFAULT_LIMITS = BatchLimits(max_records=2000, max_bytes=700_000, linger_seconds=1.0,
                             max_record_bytes=DEFAULT_LINK_BYTES - EVENT_OVERHEAD - 1024)


class EventHubsSink:
    name = "event_hubs"
    tables = frozenset({"records", "heartbeats"})

    def __init__(self, hub: str, *, namespace: str = "", credential: Any = None,
                 connection_string: str | None = None, endpoint: str = "",
                 ca_file: str | None = None, timeout: float = 30.0,
                 identity_name: str = "the agent's identity",
                 limits: BatchLimits = DEFAULT_LIMITS, logger: logging.Logger | None = None) -> None:
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
        self._conn_str = connection_string
        self._kwargs: dict[str, Any] = {"retry_total": 0, "auth_timeout": timeout}
        if endpoint:
            self._kwargs["custom_endpoint_address"] = endpoint
            self._kwargs["transport_type"] = TransportType.Amqp
        if ca_file:
            self._kwargs["connection_verify"] = str(ca_file)
        self._producer: EventHubProducerClient | None = None
        self._link_bytes: int | None = None
        self._confirmed_seq = 0  # last seq the service accepted (a partly sent batch resumes after it)
        self._fast: bool | None = None  # own single encoding verified against the SDK's (None: not yet)
        self._annotations: dict[str, bytes] = {}
        logging.getLogger("azure.eventhub").setLevel(logging.WARNING)
        logging.getLogger("azure.identity").setLevel(logging.ERROR)  # we log token failures once
        self.requests = 0  # transfers made
        self.events_sent = 0
        self.max_transfer_bytes = 0
        self.bytes_sent = 0

    @classmethod
    def from_config(cls, cfg: EventHubsSinkConfig, identity_cfg: IdentityConfig) -> EventHubsSink:
        from .factory import limits
        conn = _connection_string(cfg)
        if conn is not None:
            sink = cls(cfg.hub, namespace=cfg.namespace, connection_string=conn, endpoint=cfg.endpoint,
                       ca_file=str(cfg.ca_file) if cfg.ca_file else None, timeout=cfg.timeout)
        else:
            if not cfg.namespace:
                raise ValueError("sinks.event_hubs: set namespace (with the [identity]) or a "
                                 "connection_string_file / connection_string_env")
            sink = cls(cfg.hub, namespace=cfg.namespace, credential=identity.credential(identity_cfg),
                       endpoint=cfg.endpoint, ca_file=str(cfg.ca_file) if cfg.ca_file else None,
                       timeout=cfg.timeout, identity_name=identity.describe(identity_cfg))
        sink.limits = limits(cfg, DEFAULT_LIMITS)
        sink._configured_max_bytes = sink.limits.max_bytes
        return sink

    # -- the interface ------------------------------------------------------------------------

    def reject_reason(self, item: OutboxItem) -> str | None:
        link = self._link_bytes or DEFAULT_LINK_BYTES
        if item.size + EVENT_OVERHEAD > link:
            return (f"record of {item.size} bytes can never fit an Event Hubs message "
                    f"(the hub takes at most {link} bytes)")
        return None

    def send(self, batch: Sequence[OutboxItem]) -> None:
        todo = [item for item in batch if item.seq > self._confirmed_seq]
        if not todo:
            return
        try:
            producer = self._client()
            start = 0
            while start < len(todo):
                key = todo[start].partition_key
                edb = producer.create_batch(partition_key=key)
                self._learn_link(producer)
                end = start
                while end < len(todo) and todo[end].partition_key == key:
                    try:
                        self._add(edb, todo[end], key)
                    except ValueError:
                        if end == start:  # a single record the link can never carry
                            raise BatchTooLarge(f"record seq {todo[end].seq} ({todo[end].size} bytes) "
                                                f"does not fit an Event Hubs batch of {edb.max_size_in_bytes}"
                                                " bytes") from None
                        break
                    end += 1
                producer.send_batch(edb, timeout=self.timeout)
                self.requests += 1
                self.events_sent += end - start
                self.bytes_sent += edb.size_in_bytes
                self.max_transfer_bytes = max(self.max_transfer_bytes, edb.size_in_bytes)
                self._confirmed_seq = todo[end - 1].seq
                start = end
        except BatchTooLarge:
            raise
        except (AuthenticationError, ClientAuthenticationError) as exc:
            self._reset()
            raise self._auth_error(exc) from None
        except EventDataSendError as exc:
            self._reset()
            condition = _condition(exc)
            if condition == "amqp:link:message-size-exceeded":
                raise BatchTooLarge(f"Event Hubs rejected the batch as too large: {_text(exc)}") from None
            raise RetryableError(f"Event Hubs rejected the delivery ({condition or 'rejected'}): "
                                 f"{_text(exc)}") from None
        except EventHubError as exc:
            self._reset()
            if _condition(exc) == "amqp:unauthorized-access" or _caused_by(exc, ClientAuthenticationError):
                raise self._auth_error(exc) from None
            raise RetryableError(f"Event Hubs not reached ({type(exc).__name__}): {_text(exc)}") from None
        except (OSError, TimeoutError) as exc:
            self._reset()
            raise RetryableError(f"Event Hubs not reached ({type(exc).__name__}): {_text(exc)}") from None

    def close(self) -> None:
        self._reset()
        if self._credential is not None:
            try:
                self._credential.close()
            except Exception:  # noqa: BLE001, S110 - closing on the way out: nothing to do about it
                pass

    # -- internals ----------------------------------------------------------------------------

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

    def _learn_link(self, producer: EventHubProducerClient) -> None:
        """Once the link announced its maximum message size, fit the worker's batches to it."""
        size = getattr(producer, "_max_message_size_on_link", 0) or 0
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

    @staticmethod
    def _properties(item: OutboxItem) -> dict[str, Any]:
        props: dict[str, Any] = {"Table": TABLE_NAMES.get(item.table, item.table)}
        if item.table == "records":
            try:
                rec = json.loads(item.payload)
            except ValueError:
                rec = {}
            for name in ("Phase", "EventType"):
                value = rec.get(name) if isinstance(rec, dict) else None
                if value is not None:
                    props[name] = value
        return props

    def _event(self, item: OutboxItem, props: dict[str, Any] | None = None) -> EventData:
        event = EventData(item.payload.encode("utf-8"))
        event.content_type = "application/json"
        event.properties = self._properties(item) if props is None else props
        return event

    def _add(self, edb: Any, item: OutboxItem, key: str) -> None:
        """Add one record to the batch: our single encoding when verified, else the SDK's."""
        props = self._properties(item)
        if self._fast is None:
            self._fast = self._verify_fast_path(edb, item, key, props)
        if self._fast and all(type(v) is str for v in props.values()):
            ann = self._annotations.get(key)
            if ann is None:
                ann = self._annotations[key] = encode_annotations(key)
            _append_encoded(edb, encode_event(ann, props, item.payload.encode("utf-8")))
        else:
            edb.add(self._event(item, props))

    def _verify_fast_path(self, edb: Any, item: OutboxItem, key: str, props: dict[str, Any]) -> bool:
        """Do our bytes equal the SDK's for this record? (once per sink)"""
        try:
            from azure.eventhub import EventDataBatch
            scratch = EventDataBatch(max_size_in_bytes=edb.max_size_in_bytes * 4, partition_key=key,
                                     amqp_transport=edb._amqp_transport)
            before = scratch.size_in_bytes
            scratch.add(self._event(item, props))
            theirs = bytes(scratch._message[5][0])
            ours = encode_event(encode_annotations(key), props, item.payload.encode("utf-8"))
            grew = scratch.size_in_bytes - before
            ok = theirs == ours and grew == len(ours) + (5 if len(ours) < 256 else 8) \
                and isinstance(edb._message[5], list) and isinstance(edb._size, int)
        except Exception as exc:  # noqa: BLE001 - any surprise: the SDK's own path
            ok, why = False, f"{type(exc).__name__}: {exc}"
        else:
            why = "" if ok else "its encoding differs from ours"
        if not ok:
            logs.event(self.log, logging.INFO, "Event Hubs: using the SDK's event encoder", reason=why)
        return ok

    def _auth_error(self, exc: BaseException) -> RetryableError:
        msg = (f"Event Hubs refused the identity: {_text(exc)} -- {self.identity_name} needs the "
               f"'{ROLE}' role on the event hub {self.hub}")
        logs.event(self.log, logging.ERROR, "Event Hubs refused the identity; will retry slowly",
                   hub=self.hub, role=ROLE, identity=self.identity_name, error=_text(exc))
        return RetryableError(msg, slow=True)


# -- AMQP encoding of one event (as azure-eventhub's pure-Python encoder writes it) ---------------


def _vbytes(tag8: int, tag32: int, raw: bytes) -> bytes:
    n = len(raw)
    if n <= 255:
        return bytes((tag8, n)) + raw
    return bytes((tag32,)) + n.to_bytes(4, "big") + raw


def _compound(tag8: int, tag32: int, elements: bytes, count: int) -> bytes:
    n = len(elements)
    if count <= 255 and n < 255:
        return bytes((tag8, n + 1, count)) + elements
    return bytes((tag32,)) + (n + 4).to_bytes(4, "big") + count.to_bytes(4, "big") + elements


def _str(value: str) -> bytes:
    return _vbytes(0xA1, 0xB1, value.encode("utf-8"))


_HEADER = b"\x00\x53\x70" + _compound(0xC0, 0xD0, b"\x56\x01" + b"\x40" * 4, 5)  # durable=true
_PROPERTIES = b"\x00\x53\x73" + _compound(  # content-type is field 6 of 13
    0xC0, 0xD0, b"\x40" * 6 + _vbytes(0xA3, 0xB3, b"application/json") + b"\x40" * 6, 13)


def encode_annotations(partition_key: str) -> bytes:
    return b"\x00\x53\x72" + _compound(
        0xC1, 0xD1, _vbytes(0xA3, 0xB3, b"x-opt-partition-key") + _str(partition_key), 2)


def encode_event(annotations: bytes, properties: dict[str, str], body: bytes) -> bytes:
    """One event message: header, message annotations (from :func:`encode_annotations`),
    properties (content type), application properties (string values), a Data section."""
    app = b"".join(_str(k) + _str(v) for k, v in properties.items())
    return (_HEADER + annotations + _PROPERTIES
            + b"\x00\x53\x74" + _compound(0xC1, 0xD1, app, 2 * len(properties))
            + b"\x00\x53\x75" + _vbytes(0xA0, 0xB0, body))


def _append_encoded(edb: Any, encoded: bytes) -> None:
    """``EventDataBatch.add`` for an already encoded event (same size rule, same storage)."""
    size = len(encoded)
    after = edb._size + size + (5 if size < 256 else 8)  # the SDK's per-event batch overhead
    if after > edb.max_size_in_bytes:
        raise ValueError(f"EventDataBatch has reached its size limit: {edb.max_size_in_bytes}")
    edb._message[5].append(encoded)
    edb._size = after
    edb._count += 1



def _connection_string(cfg: EventHubsSinkConfig) -> str | None:
    """The connection string from its file or environment variable (never logged), or None."""
    if cfg.connection_string_file is not None:
        path = Path(cfg.connection_string_file)
        try:
            text = path.read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise ValueError(f"sinks.event_hubs.connection_string_file {path}: cannot read: "
                             f"{exc.strerror}") from None
        if not text:
            raise ValueError(f"sinks.event_hubs.connection_string_file {path} is empty")
        return text
    if cfg.connection_string_env:
        text = os.environ.get(cfg.connection_string_env, "").strip()
        if not text:
            raise ValueError(f"sinks.event_hubs.connection_string_env: ${cfg.connection_string_env} "
                             "is not set")
        return text
    return None


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
