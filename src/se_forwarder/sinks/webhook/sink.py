"""Notifications to a webhook over HTTPS, on ``httpx`` (imported only when this sink is built).

Delivered through the outbox like every sink: its own cursor, one record per request, the
worker's retries with backoff and Retry-After, dead letters, nothing lost across ``kill -9``.
Records the filters leave out are acknowledged without a request. Answers go through the shared
HTTP table (``answers.HTTP``: 2xx delivered, 429/408/5xx and socket errors retried with the
receiver's Retry-After, 413 split, other 4xx rejected, 3xx and 401/403 retried slowly: there is
no credential to renew, the URL itself is refused) plus httpx's exception classes. One answer
is the webhook's own: 404/410 (not found) is retried slowly ``gone_after`` times in a row, then
the destination is gone (dead-lettered with the reason; the next record that meets 404/410 is
dead-lettered at once, until a 2xx).

The URL is a secret: no message, log line or error here ever contains more than its scheme and
host, and ``httpx``'s own request log (which prints the URL) is kept below INFO.
"""

from __future__ import annotations

import json
import logging
import ssl
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import httpx

from ... import contract, redact
from ...delivery.backoff import parse_retry_after
from ...policy.match import Policy
from ..answers import HTTP, Answer, Meaning, verdict
from ..base import BatchLimits, DeliveryError, OutboxRow, SendResult, Sink
from . import formats
from .config import WebhookSinkConfig

if TYPE_CHECKING:
    from ...policy import PolicyConfig

for _name in ("httpx", "httpcore"):  # their INFO lines carry the full URL: the secret
    logging.getLogger(_name).setLevel(logging.WARNING)

MAX_BODY_TEXT = 200  # of a refusal's body, quoted in the error
ANSWERS = HTTP.extend({
    httpx.TimeoutException: Meaning.NO_ANSWER,
    httpx.HTTPError: Meaning.NOT_REACHED,  # connect, read, write, protocol, decoding errors
})


class WebhookSink(Sink):
    DEFAULT_LIMITS = BatchLimits(max_records=1, max_bytes=1_000_000, linger_seconds=0.0)

    def __init__(self, url: str, *, name: str = "webhook", fmt: str = "json",
                 phases: Sequence[str] = (), event_types: Sequence[str] = (),
                 affects_this_vm: bool | None = None, timeout: float = 10.0,
                 ca_file: Path | None = None, gone_after: int = 5,
                 policy: Policy | None = None,
                 transport: httpx.BaseTransport | None = None) -> None:
        self.name = name
        self.limits = self.DEFAULT_LIMITS
        self.tables = frozenset({contract.RECORDS})
        self.fmt = fmt
        self.phases = frozenset(phases)
        self.event_types = frozenset(event_types)
        self.affects = affects_this_vm
        self.gone_after = gone_after
        self.policy = policy
        self.where = redact.url(url)
        self._url = url
        self._gone = 0  # 404/410 answers in a row
        verify: ssl.SSLContext | bool = True
        if ca_file is not None:
            verify = ssl.create_default_context()
            verify.load_verify_locations(cafile=str(ca_file))
        self._client = httpx.Client(timeout=timeout, verify=verify, follow_redirects=False,
                                    headers={"Content-Type": "application/json"},
                                    transport=transport)

    @classmethod
    def from_config(cls, cfg: WebhookSinkConfig, policy: PolicyConfig | None) -> WebhookSink:
        return cls(cfg.url(), fmt=cfg.format, phases=cfg.phases, event_types=cfg.event_types,
                   affects_this_vm=cfg.affects_this_vm, timeout=cfg.timeout, ca_file=cfg.ca_file,
                   gone_after=cfg.gone_after,
                   policy=Policy(policy) if policy is not None else None)

    def reject_reason(self, row: OutboxRow) -> str | None:
        return None

    def close(self) -> None:
        self._client.close()

    def send(self, batch: Sequence[OutboxRow]) -> SendResult:
        result = SendResult()
        for row in batch:  # one record per batch (the limits); a loop keeps it correct anyway
            body = self._body(row)
            try:
                if body is not None:
                    self._post(body)
            except DeliveryError as exc:
                return result.rest_failed(exc)
            result = result.plus(1, None if body is None else len(body))
        return result

    def _body(self, row: OutboxRow) -> bytes | None:
        """The request body, or None when the filters leave this record out."""
        if self.phases and row.phase not in self.phases:
            return None
        if self.event_types and row.event_type not in self.event_types:
            return None
        if self.affects is None and self.fmt == "json":
            return row.payload.encode("utf-8")
        record = json.loads(row.payload)
        if self.affects is not None and bool(record.get("AffectsThisVm")) != self.affects:
            return None
        return formats.body(self.fmt, row.payload, record, self.policy)

    def _post(self, body: bytes) -> None:
        with ANSWERS.mapped(Answer.of, self._react):
            resp = self._client.post(self._url, content=body)
        answer = Answer(status=resp.status_code, retry_after=parse_retry_after(resp.headers),
                        text=resp.text[:MAX_BODY_TEXT].strip().replace(self._url, self.where))
        meaning = ANSWERS.meaning(answer)
        if meaning is Meaning.DELIVERED:
            self._gone = 0
            return
        raise self._react(answer, meaning or Meaning.REFUSED)

    def _react(self, answer: Answer, meaning: Meaning) -> DeliveryError:
        """The error for an answer, in words that never hold the URL; 404/410 counted."""
        if answer.status is None:  # the exception's text may name the URL: give the kind only
            what = (f"webhook {self.where}: no answer in time" if meaning is Meaning.NO_ANSWER
                    else f"webhook {self.where}: {type(answer.error).__name__}")
        else:
            what = f"webhook {self.where} answered {answer.status}" + (
                f": {answer.text}" if answer.text else "")
        if meaning is Meaning.NOT_FOUND:
            self._gone = min(self._gone + 1, self.gone_after)
            if self._gone >= self.gone_after:
                meaning, what = Meaning.GONE, f"{what} ({self.gone_after} times in a row)"
        elif meaning is Meaning.MISCONFIGURED:
            what += " (redirects are not followed: fix the URL)"
        return DeliveryError(what, verdict(meaning), retry_after=answer.retry_after)
