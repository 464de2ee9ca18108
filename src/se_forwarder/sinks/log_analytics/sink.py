"""Log Analytics through the Logs Ingestion API (``azure-monitor-ingestion``).

One worker batch (one table) is one ``LogsIngestionClient.upload()`` call and exactly one HTTP
request: the sink builds the JSON array from the records' own compact JSON, gzips it, and hands
the SDK a readable stream, which the SDK uploads as it is (``Content-Encoding: gzip``) instead of
re-serialising and re-chunking the records. So the sink knows both sizes of every request and
keeps them at most 1 MB (1,000,000 bytes, below the service's 1 MiB), compressed and
uncompressed; the worker's byte limit (``BatchLimits.max_bytes``) already bounds the array
exactly, and a body that still came out too large is split by the worker (``Verdict.SPLIT``).

Retries belong to the delivery worker (full-jitter exponential backoff with a cap, Retry-After,
a slow schedule for auth errors, stop-aware waits). azure-core's own retry policy is switched off
(``retry_total=0``): it retries a POST only on 500/503/504 or with Retry-After, without jitter,
blocking inside ``upload()`` where a stop request cannot interrupt it, and not at all on
connection errors, timeouts or a 429 without Retry-After. Two layers would multiply the
attempts; one layer that sees every failure gives one schedule, one log line per failure and the
failure counters.

Answers go through the shared HTTP table (``answers.HTTP``) extended with azure-core's
exceptions and the service's error codes (``ANSWERS``); the sink reacts to what they mean:

* 204: delivered. 429, 408, 5xx, connection errors, timeouts, dropped connections: retried, with
  ``retry-after-ms`` / ``x-ms-retry-after-ms`` / ``Retry-After`` when the service gave one.
* 413: split by the worker. 400 and other 4xx a resend cannot fix: rejected with the service's
  message; but 400 ``InvalidStream`` (the stream is not in the DCR) is a configuration error,
  retried slowly with an error line.
* 401 (the token refused): a new credential and client (a fresh token), then the ordinary
  schedule, so the backlog moves as soon as the token is good.
* 403 (no role): a new credential too, the slow schedule (at least every minute) and an error
  line naming the missing role (Monitoring Metrics Publisher on the DCR). 404 (an unknown DCR)
  and a token that cannot be obtained: the slow schedule and an error line.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import zlib
from collections.abc import Callable, Sequence
from typing import Any

# azure-core and the SDK are imported here: this module is imported only when the sink is
# configured (the sink registry imports it lazily).
from azure.core.exceptions import (
    AzureError,
    ClientAuthenticationError,
    HttpResponseError,
    ServiceRequestError,
    ServiceResponseError,
)
from azure.monitor.ingestion import LogsIngestionClient

from ... import contract, logs
from ...backoff import headers_of, parse_retry_after
from ...clock import SYSTEM, Clock
from ...errors import Verdict
from ...identity import bounded_transport, credential
from ..answers import HTTP, Answer, Meaning, Reaction, Reactions, verdict
from ..base import BatchLimits, DeliveryError, OutboxRow, SendResult, Sink, SinkContext
from .config import LogAnalyticsSinkConfig

MAX_REQUEST_BYTES = 1_000_000  # per call, compressed and uncompressed (the service: 1 MB)
MAX_ANSWER_BYTES = 1024 * 1024  # an answer is a few hundred bytes; more is cut, closed, retried
MAX_FIELD_BYTES = 64 * 1024  # longer field values are truncated by the service: refuse them
ROLE = "Monitoring Metrics Publisher"
GZIP_LEVEL = 3  # 1 MB of records in ~2-5 ms; level 6 takes 2-4x longer for 5-30 % smaller bodies
DEFAULT_LIMITS = BatchLimits(
    max_records=1000,
    max_bytes=MAX_REQUEST_BYTES,
    linger_seconds=1.0,
    max_record_bytes=MAX_REQUEST_BYTES - 2,
)
ANSWERS = HTTP.extend(
    {
        "InvalidStream": Meaning.MISCONFIGURED,  # the stream is not in the DCR
        # without a status: the service was never asked
        ClientAuthenticationError: Meaning.NO_TOKEN,
        ServiceRequestError: Meaning.NOT_REACHED,  # the request was not sent
        # sent; the answer timed out or the connection dropped
        ServiceResponseError: Meaning.NO_ANSWER,
        AzureError: Meaning.SERVER_ERROR,  # anything else azure-core raises without a status
    }
)


def read_answer(exc: Exception, clock: Clock = SYSTEM) -> Answer:
    """What the service said, out of azure-core's exception (its public fields only); a
    Retry-After date is read on ``clock``."""
    if not isinstance(exc, HttpResponseError) or exc.status_code is None:
        return Answer.of(exc)
    err = getattr(exc, "error", None)
    return Answer(
        status=exc.status_code,
        code=getattr(err, "code", None),
        error=exc,
        retry_after=parse_retry_after(headers_of(exc.response), clock),
        text=_service_message(exc),
    )


def _service_message(exc: HttpResponseError) -> str:
    """The service's own ``error.message`` (and code), else the exception's text, on one line."""
    err = getattr(exc, "error", None)
    code = getattr(err, "code", None)
    message = getattr(err, "message", None)
    if not message:
        try:
            body = json.loads(exc.response.text()) if exc.response is not None else {}
            message = body["error"]["message"]
            code = code or body["error"].get("code")
        except Exception:
            message = str(exc.message or exc)
    text = f"{code}: {message}" if code else str(message)
    return " ".join(text.split())


class LogAnalyticsSink(Sink):
    """Sends ``records`` to ``records_stream`` and ``heartbeats`` to ``heartbeats_stream``."""

    name = "log_analytics"
    tables = frozenset(contract.tables())

    def __init__(
        self,
        endpoint: str,
        dcr_immutable_id: str,
        credential: Any,
        *,
        records_stream: str | None = None,
        heartbeats_stream: str | None = None,
        ca_file: str | None = None,
        timeout: float = 30.0,
        identity_name: str = "the agent's identity",
        limits: BatchLimits = DEFAULT_LIMITS,
        renew_credential: Callable[[], Any] | None = None,
        logger: logging.Logger | None = None,
        transport: Any = None,
        clock: Clock = SYSTEM,
    ) -> None:
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
        self.clock = clock  # the answers' deadline and Retry-After dates
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
        # azure-core's HttpTransport interface (tests answer through one); by default a new
        # bounded transport per client (one answer: 1 MiB and `timeout` overall).
        self._transport = transport
        self.client = self._new_client(credential)
        # The SDK logs every request at INFO; the worker logs what matters, once.
        logging.getLogger("azure.core.pipeline.policies.http_logging_policy").setLevel(
            logging.WARNING
        )
        logging.getLogger("azure.identity").setLevel(logging.ERROR)  # we log token failures once

    @classmethod
    def from_config(cls, cfg: LogAnalyticsSinkConfig, cx: SinkContext) -> LogAnalyticsSink:
        identity_cfg = cx.identity
        return cls(
            cfg.endpoint,
            cfg.dcr_immutable_id,
            credential.build(identity_cfg, clock=cx.clock),
            records_stream=cfg.records_stream,
            heartbeats_stream=cfg.heartbeats_stream,
            ca_file=str(cfg.ca_file) if cfg.ca_file else None,
            timeout=cfg.timeout,
            identity_name=credential.describe(identity_cfg),
            limits=cfg.limits(DEFAULT_LIMITS),
            renew_credential=lambda: credential.build(identity_cfg, clock=cx.clock),
            logger=cx.log("sink.log_analytics"),
            clock=cx.clock,
        )

    # -- the interface ------------------------------------------------------------------------

    def reject_reason(self, row: OutboxRow) -> str | None:
        """A field over 64 KB (the service would truncate it); the record's size is the worker's
        rule (``max_record_bytes``: one record in one request)."""
        if len(row.payload) * 4 <= MAX_FIELD_BYTES:  # UTF-8 takes at most 4 bytes a character
            return None
        if row.size <= MAX_FIELD_BYTES:
            return None  # no field of a record this small can be over the limit
        try:
            record = json.loads(row.payload)
        except ValueError:
            return "record is not valid JSON"
        if isinstance(record, dict):
            for key, value in record.items():
                if value is None:
                    continue
                n = (
                    len(value.encode("utf-8"))
                    if isinstance(value, str)
                    else len(
                        json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
                    )
                )
                if n > MAX_FIELD_BYTES:
                    return (
                        f"field {key} holds {n} bytes; Log Analytics keeps at most "
                        f"{MAX_FIELD_BYTES} bytes per field"
                    )
        return None

    def send(self, batch: Sequence[OutboxRow]) -> SendResult:
        if not batch:
            return SendResult()
        stream = self.streams[batch[0].table]
        raw = ("[" + ",".join(row.payload for row in batch) + "]").encode("utf-8")
        z = zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
        body = z.compress(raw) + z.flush()
        if max(len(raw), len(body)) > MAX_REQUEST_BYTES:  # the service's limit, before asking it
            return SendResult().rest_failed(
                DeliveryError(
                    f"{len(batch)} records make {len(raw)} bytes ({len(body)} gzip), "
                    f"over {MAX_REQUEST_BYTES}",
                    Verdict.SPLIT,
                )
            )
        try:
            with ANSWERS.mapped(
                lambda exc: read_answer(exc, self.clock),
                lambda answer, meaning: self._react(answer, meaning, stream),
            ):
                self.client.upload(self.dcr_id, stream, io.BytesIO(body))
        except DeliveryError as exc:
            return SendResult().rest_failed(exc)
        return SendResult().plus(len(batch), len(body))

    def _renew(self) -> bool:
        """Drop the refused token: a new credential and client (their token caches are theirs).
        False when there is no way to get another (a credential given as it is)."""
        if self._renew_credential is None:
            return False
        old = (self.client, self._credential)
        self._credential = self._renew_credential()
        self.client = self._new_client(self._credential)
        for obj in old:
            with contextlib.suppress(Exception):
                obj.close()
        return True

    def _new_client(self, cred: Any) -> LogsIngestionClient:
        kwargs = self._client_kwargs
        transport = self._transport
        if transport is None:  # a transport is closed with its client: a new one per client
            transport = bounded_transport.transport(
                MAX_ANSWER_BYTES,
                kwargs["read_timeout"],
                self.clock,
                **{
                    k: v
                    for k, v in kwargs.items()
                    if k in ("connection_timeout", "read_timeout", "connection_verify")
                },
            )
        return LogsIngestionClient(
            endpoint=self.endpoint, credential=cred, transport=transport, **kwargs
        )

    def close(self) -> None:
        for obj in (self.client, self._credential):
            with contextlib.suppress(Exception):
                obj.close()

    # -- answers ------------------------------------------------------------------------------

    def _react(self, answer: Answer, meaning: Meaning, stream: str) -> DeliveryError:
        """The side effects of an answer (a new credential) and its error, worded (and logged
        when a person must act) by ``REACTIONS``."""
        renewed = meaning.renews and self._renew()
        words = {
            "status": answer.status,
            "said": answer.text,
            "identity": self.identity_name,
            "role": ROLE,
            "dcr": self.dcr_id,
            "stream": stream,
            "kind": type(answer.error).__name__,
            "meaning": meaning.value,
        }
        message = REACTIONS.say(meaning, answer, words, self.log)
        return DeliveryError(
            message, verdict(meaning, renewed=renewed), retry_after=answer.retry_after
        )


# What the sink says, and logs once, for an answer that needs a person's attention.
_LOGGED = {
    "status": "status",
    "role": "role",
    "dcr_immutable_id": "dcr",
    "stream": "stream",
    "identity": "identity",
    "error": "message",
}
REACTIONS = Reactions(
    {
        Meaning.THROTTLED: Reaction("throttled ({status}): {said}"),
        Meaning.TOKEN_REFUSED: Reaction(
            "Logs Ingestion token refused (401): {said}",
            (logging.WARNING, "Log Analytics refused the token (401); getting a new one"),
            _LOGGED,
        ),
        Meaning.NOT_AUTHORISED: Reaction(
            "Logs Ingestion not authorised ({status}): {said} -- {identity} needs the '{role}' "
            "role on the data collection rule {dcr} (stream {stream})",
            (logging.ERROR, "Log Analytics refused the identity; will retry slowly"),
            _LOGGED,
        ),
        Meaning.NO_TOKEN: Reaction(
            "cannot get a token for {identity} (scope https://monitor.azure.com): {said}",
            (logging.ERROR, "Log Analytics: no access token; will retry slowly"),
            _LOGGED,
        ),
        Meaning.NOT_FOUND: Reaction(
            "Logs Ingestion {status}: {said} -- check endpoint and dcr_immutable_id ({dcr})",
            (logging.ERROR, "Log Analytics: data collection rule not found; will retry slowly"),
            _LOGGED,
        ),
        # Dead-lettering would empty the outbox into the dead-letter file: keep the records.
        Meaning.MISCONFIGURED: Reaction(
            "Logs Ingestion {status} on stream {stream}: {said}",
            (
                logging.ERROR,
                "Log Analytics: stream not declared in the data collection rule; will retry slowly",
            ),
            _LOGGED,
        ),
    },
    answered=Reaction("Logs Ingestion {status} on stream {stream}: {said}"),
    unanswered=Reaction("Logs Ingestion {meaning} ({kind}): {said}"),
)
