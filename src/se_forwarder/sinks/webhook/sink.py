"""Notifications to a webhook over HTTPS, on ``httpx`` (imported only when this sink is built).

Delivered through the outbox like every sink: its own cursor, one record per request, the
worker's retries with backoff and Retry-After, dead letters, nothing lost across ``kill -9``.
Records the filters leave out are acknowledged without a request. Answers go through the shared
HTTP table (``answers.HTTP``: 2xx delivered, 429/408/5xx and socket errors retried with the
receiver's Retry-After, 413 split, other 4xx rejected, 3xx and 401/403 retried slowly: there is
no credential to renew, the URL itself is refused) plus httpx's exception classes. One answer
is the webhook's own: 404/410 (not found) is retried slowly until it has lasted
``gone_after_seconds`` (a time, not a count: a receiver refusing for a few seconds must not
dead-letter a notification), then the destination is gone (dead-lettered with the reason; the
next record that meets 404/410 is dead-lettered at once, until a 2xx).

The peer is bounded: each request has one overall deadline (``timeout``: connect, send and the
whole answer; httpx's own timeouts are per read, so a body trickled a byte at a time would never
end them), enforced by asyncio's cancellation around httpx's async client (the way httpx's
maintainers give for a total timeout); at most ``MAX_BODY_READ`` bytes of an answer are read,
undecoded (a compressed answer is not inflated).

The URL is a secret: no message, log line or error here ever contains more than its scheme and
host. A receiver's answer that quotes the URL or its path back (Slack's ``no_service`` page,
Express's ``Cannot POST /…``), plain, percent-encoded or JSON-escaped, is masked before it is cut
(``redact.answer``); ``httpx``'s own request log (which prints the URL) is kept below INFO.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import ssl
from collections.abc import Sequence
from pathlib import Path

import httpx

from ... import contract, logs, redact
from ...backoff import parse_retry_after
from ...clock import SYSTEM, Clock
from ...notices import TABLE as NOTICES
from ...policy.config import PolicyConfig
from ...policy.match import Policy
from ..answers import HTTP, Answer, Meaning, Reaction, Reactions, verdict
from ..base import BatchLimits, DeliveryError, OutboxRow, SendResult, Sink, SinkContext
from . import formats
from .config import WebhookSinkConfig
from .template import template as template_of
from .template import templates as templates_of

for _name in ("httpx", "httpcore"):  # their INFO lines carry the full URL: the secret
    logging.getLogger(_name).setLevel(logging.WARNING)

MAX_BODY_READ = 4096  # bytes of an answer ever read (a 1.5 GB error page costs nothing)
MAX_BODY_TEXT = 200  # of a refusal's body, quoted in the error (after masking)
ANSWERS = HTTP.extend(
    {
        httpx.TimeoutException: Meaning.NO_ANSWER,
        httpx.HTTPError: Meaning.NOT_REACHED,  # connect, read, write, protocol, decoding errors
    }
)


class WebhookSink(Sink):
    DEFAULT_LIMITS = BatchLimits(max_records=1, max_bytes=1_000_000, linger_seconds=0.0)

    def __init__(
        self,
        url: str,
        *,
        name: str = "webhook",
        fmt: str = "json",
        phases: Sequence[str] = (),
        event_types: Sequence[str] = (),
        affects_this_vm: bool | None = None,
        timeout: float = 10.0,
        ca_file: Path | None = None,
        gone_after_seconds: float = 3600.0,
        policy: Policy | None = None,
        notices: bool = True,
        template: str = "",
        templates: dict[str, str] | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        clock: Clock = SYSTEM,
        logger: logging.Logger | None = None,
    ) -> None:
        self.name = name
        self.limits = self.DEFAULT_LIMITS
        self.tables = frozenset({contract.RECORDS, *([NOTICES] if notices else [])})
        self.shape = template_of(template, fmt) if template else None
        self.shapes = templates_of(templates or {}, fmt)  # per message kind
        self.fmt = fmt
        self.phases = frozenset(phases)
        self.event_types = frozenset(event_types)
        self.affects = affects_this_vm
        self.gone_after = gone_after_seconds
        self.policy = policy
        self.timeout = timeout
        self.where = redact.url(url)
        self._url = url
        self._secrets = redact.url_secrets(url)
        self.clock = clock  # how long 404/410 has lasted; Retry-After dates
        self.log = logger or logs.get("sink.webhook")
        self._not_found_since: float | None = None  # the first 404/410 of the run going on
        self._gone = False
        verify: ssl.SSLContext | bool = True
        if ca_file is not None:
            verify = ssl.create_default_context()
            verify.load_verify_locations(cafile=str(ca_file))
        # One event loop for the sink's life, on its worker's thread (asyncio.Runner creates it
        # at the first send): the connection pool survives from one request to the next.
        self._runner = asyncio.Runner()
        self._client = httpx.AsyncClient(
            timeout=timeout,
            verify=verify,
            follow_redirects=False,
            transport=transport,
            headers={"Content-Type": "application/json", "Accept-Encoding": "identity"},
        )

    @classmethod
    def from_config(cls, cfg: WebhookSinkConfig, cx: SinkContext) -> WebhookSink:
        return cls(
            cfg.url(),
            fmt=cfg.format,
            phases=cfg.phases,
            event_types=cfg.event_types,
            affects_this_vm=cfg.affects_this_vm,
            timeout=cfg.timeout,
            ca_file=cfg.ca_file,
            gone_after_seconds=cfg.gone_after_seconds,
            notices=cfg.notices,
            template=cfg.template,
            templates=cfg.templates,
            policy=Policy(cx.policy or PolicyConfig()),  # None: the default policy
            clock=cx.clock,
            logger=cx.log("sink.webhook"),
        )

    def reject_reason(self, row: OutboxRow) -> str | None:
        return None

    def close(self) -> None:
        try:
            self._runner.run(self._client.aclose())
        finally:
            self._runner.close()

    def send(self, batch: Sequence[OutboxRow]) -> SendResult:
        result = SendResult()
        for row in batch:  # one record per batch (the limits); a loop keeps it correct anyway
            body = self._body(row)
            failure = None if body is None else self._post(body)
            if failure is not None:
                return result.rest_failed(failure)
            result = result.plus(1, None if body is None else len(body))
        return result

    def _body(self, row: OutboxRow) -> bytes | None:
        """The request body, or None when the filters leave this record (or notice) out; a
        notice is never left out by ``phases``."""
        if self.phases and row.table != NOTICES and row.phase not in self.phases:
            return None
        if self.event_types and row.event_type not in self.event_types:
            return None
        plain = self.shape is None and not self.shapes
        if self.affects is None and self.fmt == "json" and plain:
            return row.payload.encode("utf-8")
        record = json.loads(row.payload)
        if self.affects is not None and bool(record.get("AffectsThisVm")) != self.affects:
            return None
        shape = self.shapes.get(str(record.get("Notice") or record.get("Phase")), self.shape)
        return formats.body(self.fmt, row.payload, record, self.policy, shape)

    def _post(self, body: bytes) -> DeliveryError | None:
        """One request: None when it was delivered, else the error for the rest."""
        try:
            with ANSWERS.mapped(self._no_answer, self._react):
                answer = self._runner.run(self._exchange(body))
        except DeliveryError as exc:
            return exc
        meaning = ANSWERS.meaning(answer)
        if meaning is Meaning.DELIVERED:
            self._not_found_since, self._gone = None, False
            return None
        return self._react(answer, meaning or Meaning.REFUSED)

    async def _exchange(self, body: bytes) -> Answer:
        """One request and at most ``MAX_BODY_READ`` bytes of its answer, within ``timeout``."""
        async with (
            asyncio.timeout(self.timeout),
            self._client.stream("POST", self._url, content=body) as resp,
        ):
            data, cut = bytearray(), False
            # httpx types this async generator as an AsyncIterator (no aclose in the type)
            raw = resp.aiter_raw()
            async with contextlib.aclosing(raw) as chunks:  # type: ignore[type-var]
                async for chunk in chunks:
                    data += chunk
                    if len(data) >= MAX_BODY_READ:
                        cut = True
                        break
        encoding = resp.headers.get("Content-Encoding", "identity").lower()
        if encoding != "identity":
            text = f"(a {encoding}-compressed answer, not inflated)"
        else:
            text = redact.answer(
                _decode(bytes(data[:MAX_BODY_READ]), resp.charset_encoding),
                self._secrets,
                cut=cut,
                limit=MAX_BODY_TEXT,
            )
        return Answer(
            status=resp.status_code,
            retry_after=parse_retry_after(resp.headers, self.clock),
            text=text,
        )

    def _no_answer(self, error: Exception) -> Answer:
        """An exception instead of an answer; its text may hold the URL: never kept."""
        return Answer(error=error)

    def _react(self, answer: Answer, meaning: Meaning) -> DeliveryError:
        """The error for an answer, worded by ``REACTIONS`` in words that never hold the URL
        (the exception's text may: only its kind is given); 404/410 timed."""
        lasted = 0.0
        if meaning is Meaning.NOT_FOUND:
            now = self.clock.monotonic()
            if self._not_found_since is None:
                self._not_found_since = now
            lasted = now - self._not_found_since
            if self._gone or lasted >= self.gone_after:
                self._gone = True
                meaning = Meaning.GONE
        words = {
            "where": self.where,
            "status": answer.status,
            "said": f": {answer.text}" if answer.text else "",
            "kind": type(answer.error).__name__,
            "timeout": self.timeout,
            "lasted": lasted,
        }
        message = REACTIONS.say(meaning, answer, words, self.log)
        return DeliveryError(message, verdict(meaning), retry_after=answer.retry_after)


_ANSWERED = "webhook {where} answered {status}{said}"
REACTIONS = Reactions(
    {
        Meaning.GONE: Reaction(_ANSWERED + " (for {lasted:.0f} s; gone)"),
        Meaning.MISCONFIGURED: Reaction(_ANSWERED + " (redirects are not followed: fix the URL)"),
    },
    answered=Reaction(_ANSWERED),
    unanswered=Reaction("webhook {where}: {kind}"),
    unanswered_by_meaning={
        Meaning.NO_ANSWER: Reaction("webhook {where}: no answer within {timeout:g} s")
    },
)


def _decode(data: bytes, charset: str | None) -> str:
    try:
        return data.decode(charset or "utf-8", "replace")
    except LookupError:  # a charset Python does not know
        return data.decode("utf-8", "replace")
