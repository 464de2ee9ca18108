"""Log Analytics through the Logs Ingestion API (``azure-monitor-ingestion``).

One worker batch (one table) is one ``LogsIngestionClient.upload()`` call and exactly one HTTP
request: the sink builds the JSON array from the records' own compact JSON, gzips it, and hands
the SDK a readable stream, which the SDK uploads as it is (``Content-Encoding: gzip``) instead of
re-serialising and re-chunking the records. So the sink knows both sizes of every request and
keeps them at most 1 MB (1,000,000 bytes, below the service's 1 MiB), compressed and
uncompressed; the worker's byte limit (``BatchLimits.max_bytes``) already bounds the array
exactly, and a body that still came out too large is split by the worker (``BatchTooLarge``).

Retries belong to the delivery worker (full-jitter exponential backoff with a cap, Retry-After,
a slow schedule for auth errors, stop-aware waits). azure-core's own retry policy is switched off
(``retry_total=0``): it retries a POST only on 500/503/504 or with Retry-After, without jitter,
blocking inside ``upload()`` where a stop request cannot interrupt it, and not at all on
connection errors, timeouts or a 429 without Retry-After. Two layers would multiply the
attempts; one layer that sees every failure gives one schedule, one log line per failure and the
failure counters.

Answers, mapped to the sink interface:

* 204: delivered.
* 429: ``RetryableError`` with ``retry-after-ms`` / ``x-ms-retry-after-ms`` / ``Retry-After``.
* 413: ``BatchTooLarge`` (the worker halves the batch).
* 400 and other 4xx that a resend cannot fix: ``BatchRejected`` with the service's message.
* 401 (the token refused): a new credential and client (a fresh token), ``RetryableError`` on
  the ordinary schedule, so the backlog moves as soon as the token is good.
* 403 (no role) and a token that cannot be obtained: ``RetryableError(slow=True)`` (retried at
  least every minute) and an error line naming the missing role (Monitoring Metrics Publisher on
  the DCR). 404 (an unknown DCR) too.
* 408, 5xx, connection errors, timeouts, dropped connections: ``RetryableError``.
"""

from __future__ import annotations

import io
import json
import logging
import zlib
from collections.abc import Callable, Sequence
from typing import Any

# azure-core and the SDK are imported here: this module is imported only when the sink is
# configured (the sink registry imports it lazily).
from azure.core.exceptions import (
    ClientAuthenticationError,
    HttpResponseError,
    ServiceRequestError,
    ServiceResponseError,
)
from azure.monitor.ingestion import LogsIngestionClient

from ... import contract, logs
from ...config import IdentityConfig
from ...delivery.backoff import parse_retry_after as _retry_after
from .. import credential
from ..base import BatchLimits, BatchRejected, BatchTooLarge, OutboxRow, RetryableError
from .config import LogAnalyticsSinkConfig

MAX_REQUEST_BYTES = 1_000_000  # per call, compressed and uncompressed (the service: 1 MB)
MAX_FIELD_BYTES = 64 * 1024  # longer field values are truncated by the service: refuse them
ROLE = "Monitoring Metrics Publisher"
GZIP_LEVEL = 3  # 1 MB of records in ~2-5 ms; level 6 takes 2-4x longer for 5-30 % smaller bodies
DEFAULT_LIMITS = BatchLimits(max_records=1000, max_bytes=MAX_REQUEST_BYTES, linger_seconds=1.0,
                             max_record_bytes=MAX_REQUEST_BYTES - 2)


def _service_message(exc: HttpResponseError) -> str:
    """The service's own ``error.message`` (and code), else the exception's text, on one line."""
    err = getattr(exc, "error", None)
    code = getattr(err, "code", None)
    message = getattr(err, "message", None)
    if not message:
        try:
            body = exc.response.json() if exc.response is not None else None
            message = body["error"]["message"]
            code = code or body["error"].get("code")
        except Exception:  # noqa: BLE001 - not the usual error shape
            message = str(exc.message or exc)
    text = f"{code}: {message}" if code else str(message)
    return " ".join(text.split())


class LogAnalyticsSink:
    """Sends ``records`` to ``records_stream`` and ``heartbeats`` to ``heartbeats_stream``."""

    name = "log_analytics"
    tables = frozenset(contract.tables())

    def __init__(self, endpoint: str, dcr_immutable_id: str, credential: Any, *,
                 records_stream: str | None = None, heartbeats_stream: str | None = None,
                 ca_file: str | None = None, timeout: float = 30.0,
                 identity_name: str = "the agent's identity",
                 limits: BatchLimits = DEFAULT_LIMITS,
                 renew_credential: Callable[[], Any] | None = None,
                 logger: logging.Logger | None = None) -> None:
        self.endpoint = endpoint.rstrip("/")
        self.dcr_id = dcr_immutable_id
        self.streams = {key: spec.stream for key, spec in contract.tables().items()}
        if records_stream:
            self.streams[contract.RECORDS] = records_stream
        if heartbeats_stream:
            self.streams[contract.HEARTBEATS] = heartbeats_stream
        self.limits = limits
        self.identity_name = identity_name
        self.log = logger or logs.get("sink.log_analytics")
        self._credential = credential
        self._renew_credential = renew_credential
        self._client_kwargs: dict[str, Any] = {
            "retry_total": 0,  # our delivery worker owns retries (see the module docstring)
            "connection_timeout": min(timeout, 10.0),
            "read_timeout": timeout,
            "logging_enable": False,
        }
        if ca_file:
            self._client_kwargs["connection_verify"] = str(ca_file)
        self.client = LogsIngestionClient(endpoint=self.endpoint, credential=credential,
                                          **self._client_kwargs)
        # The SDK logs every request at INFO; the worker logs what matters, once.
        logging.getLogger("azure.core.pipeline.policies.http_logging_policy").setLevel(logging.WARNING)
        logging.getLogger("azure.identity").setLevel(logging.ERROR)  # we log token failures once
        self.requests = 0  # requests made (for the bench and status)
        self.max_compressed = 0
        self.max_uncompressed = 0
        self.bytes_compressed = 0
        self.bytes_uncompressed = 0

    @classmethod
    def from_config(cls, cfg: LogAnalyticsSinkConfig, identity_cfg: IdentityConfig) -> LogAnalyticsSink:
        return cls(cfg.endpoint, cfg.dcr_immutable_id, credential.build(identity_cfg),
                   records_stream=cfg.records_stream, heartbeats_stream=cfg.heartbeats_stream,
                   ca_file=str(cfg.ca_file) if cfg.ca_file else None, timeout=cfg.timeout,
                   identity_name=credential.describe(identity_cfg),
                   limits=cfg.limits(DEFAULT_LIMITS),
                   renew_credential=lambda: credential.build(identity_cfg))

    # -- the interface ------------------------------------------------------------------------

    def reject_reason(self, row: OutboxRow) -> str | None:
        if len(row.payload) * 4 <= MAX_FIELD_BYTES:  # UTF-8 takes at most 4 bytes a character
            return None
        size = row.size
        if size + 2 > MAX_REQUEST_BYTES:
            return f"record of {size} bytes can never fit a {MAX_REQUEST_BYTES}-byte Logs Ingestion call"
        if size <= MAX_FIELD_BYTES:
            return None  # no field of a record this small can be over the limit
        try:
            record = json.loads(row.payload)
        except ValueError:
            return "record is not valid JSON"
        if isinstance(record, dict):
            for key, value in record.items():
                if value is None:
                    continue
                n = len(value.encode("utf-8")) if isinstance(value, str) else \
                    len(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))
                if n > MAX_FIELD_BYTES:
                    return (f"field {key} holds {n} bytes; Log Analytics keeps at most "
                            f"{MAX_FIELD_BYTES} bytes per field")
        return None

    def send(self, batch: Sequence[OutboxRow]) -> None:
        if not batch:
            return
        table = batch[0].table
        stream = self.streams[table]
        raw = ("[" + ",".join(row.payload for row in batch) + "]").encode("utf-8")
        if len(raw) > MAX_REQUEST_BYTES:
            raise BatchTooLarge(f"{len(batch)} records make {len(raw)} bytes, over {MAX_REQUEST_BYTES}")
        z = zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
        body = z.compress(raw) + z.flush()
        if len(body) > MAX_REQUEST_BYTES:
            raise BatchTooLarge(f"{len(batch)} records make {len(body)} gzip bytes, over {MAX_REQUEST_BYTES}")
        self.requests += 1
        try:
            self.client.upload(self.dcr_id, stream, io.BytesIO(body))
        except HttpResponseError as exc:
            raise self._classify(exc, stream) from None
        except (ServiceRequestError, ServiceResponseError) as exc:
            raise RetryableError(f"Logs Ingestion not reached ({type(exc).__name__}): "
                                 f"{' '.join(str(exc).split())[:300]}") from None
        self.max_compressed = max(self.max_compressed, len(body))
        self.max_uncompressed = max(self.max_uncompressed, len(raw))
        self.bytes_compressed += len(body)
        self.bytes_uncompressed += len(raw)

    def _renew(self) -> None:
        """Drop the refused token: a new credential and client (their token caches are theirs)."""
        if self._renew_credential is None:
            return
        old = (self.client, self._credential)
        self._credential = self._renew_credential()
        self.client = LogsIngestionClient(endpoint=self.endpoint, credential=self._credential,
                                          **self._client_kwargs)
        for obj in old:
            try:
                obj.close()
            except Exception:  # noqa: BLE001, S110 - closing what is replaced: nothing to do
                pass

    def close(self) -> None:
        for obj in (self.client, self._credential):
            try:
                obj.close()
            except Exception:  # noqa: BLE001, S110 - closing on the way out: nothing to do about it
                pass

    # -- answers ------------------------------------------------------------------------------

    def _classify(self, exc: HttpResponseError, stream: str) -> Exception:
        status = exc.status_code
        if status is None:  # no answer from the service: the token could not be obtained
            if isinstance(exc, ClientAuthenticationError):
                msg = (f"cannot get a token for {self.identity_name} (scope https://monitor.azure.com): "
                       f"{' '.join(str(exc.message or exc).split())[:300]}")
                logs.event(self.log, logging.ERROR, "Log Analytics: no access token; will retry slowly",
                           error=msg)
                return RetryableError(msg, slow=True)
            return RetryableError(f"Logs Ingestion failed: {' '.join(str(exc).split())[:300]}")
        headers = exc.response.headers if exc.response is not None else None
        message = _service_message(exc)
        if status == 429:
            return RetryableError(f"throttled (429): {message}", retry_after=_retry_after(headers))
        if status == 413:
            return BatchTooLarge(f"413: {message}")
        if status == 401:  # the token itself was refused: a new one, the ordinary schedule
            logs.event(self.log, logging.WARNING, "Log Analytics refused the token (401); "
                       "getting a new one", identity=self.identity_name, error=message)
            self._renew()
            return RetryableError(f"Logs Ingestion token refused (401): {message}")
        if status == 403:  # a role missing: minutes to appear once granted; every minute at most
            msg = (f"Logs Ingestion not authorised (403): {message} -- {self.identity_name} needs "
                   f"the '{ROLE}' role on the data collection rule {self.dcr_id} (stream {stream})")
            logs.event(self.log, logging.ERROR, "Log Analytics refused the identity; will retry slowly",
                       status=status, role=ROLE, dcr_immutable_id=self.dcr_id,
                       identity=self.identity_name, error=message)
            return RetryableError(msg, slow=True)
        if status == 404:
            msg = (f"Logs Ingestion 404: {message} -- check endpoint and dcr_immutable_id "
                   f"({self.dcr_id})")
            logs.event(self.log, logging.ERROR, "Log Analytics: data collection rule not found; "
                       "will retry slowly", dcr_immutable_id=self.dcr_id, error=message)
            return RetryableError(msg, slow=True)
        if status == 408 or status >= 500:
            return RetryableError(f"Logs Ingestion {status}: {message}", retry_after=_retry_after(headers))
        if status == 400 and getattr(getattr(exc, "error", None), "code", None) == "InvalidStream":
            # The stream is not in the DCR: a configuration error, not a bad batch. Dead-lettering
            # would empty the outbox into the dead-letter file; keep the records and say so.
            logs.event(self.log, logging.ERROR, "Log Analytics: stream not declared in the data "
                       "collection rule; will retry slowly", stream=stream,
                       dcr_immutable_id=self.dcr_id, error=message)
            return RetryableError(f"Logs Ingestion 400 on stream {stream}: {message}", slow=True)
        if 400 <= status < 500:
            return BatchRejected(f"Logs Ingestion {status} on stream {stream}: {message}")
        return RetryableError(f"Logs Ingestion answered {status}: {message}")
