"""Sink conformance: every sink classifies the same answers the same way (``helpers.sink_answers``:
200/204, 400, 401 and 403 with a new credential, 404/410, 413, 429 and 503 with Retry-After, 500,
a connection reset, a timeout, a partial delivery), in milliseconds, with no server:

* Log Analytics: the real ``LogsIngestionClient`` over azure-core's ``HttpTransport`` interface
  (a scripted transport), so the SDK's pipeline, its error mapping and our table all run;
* the webhook: the real ``httpx.Client`` over an ``httpx.MockTransport``;
* Event Hubs: its SDK speaks AMQP and takes no transport, so the SDK's own public exceptions,
  built as it builds them, go through the sink's table and reactions exactly as ``send`` runs
  them (``ANSWERS.mapped(read_answer, sink.failure)``); the stand-in test
  (``test_sink_event_hubs.py``) proves the SDK raises those, and covers Accepted and a partial
  send end to end.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import httpx
import pytest
from azure.core.exceptions import ServiceResponseError
from helpers.fake_transports import FakeCredential, ScriptedHttpTransport, Step, scripted_httpx
from helpers.sink_answers import EVENT_HUBS, EXPECTED, HTTP, Expected

from se_forwarder.errors import DeliveryError, Verdict
from se_forwarder.outbox import OutboxRow
from se_forwarder.sinks.base import SendResult


def batch(n: int = 1) -> list[OutboxRow]:
    return [
        OutboxRow.raw(
            "records",
            "vm-1",
            json.dumps({"RecordId": f"r{i}", "Phase": "FirstSeen"}),
            seq=i,
            phase="FirstSeen",
            event_type="Reboot",
        )
        for i in range(1, n + 1)
    ]


@dataclass
class Outcome:
    verdict: Verdict
    retry_after: float | None = None
    renewed: bool = False


def outcome(send, *args) -> Outcome:
    """What ``send`` returned (it never raises for a batch it could not deliver)."""
    result: SendResult = send(*args)
    if result.failure is not None:
        assert result.delivered == 0
        return Outcome(result.failure.verdict, result.failure.retry_after)
    assert result.delivered == len(args[0])
    return Outcome(Verdict.DELIVERED)


# -- Log Analytics: azure-core's transport interface ---------------------------------------------

LA_SOCKET: dict[str, Step] = {  # what azure-core's requests transport raises
    "connection reset": ServiceResponseError(
        "('Connection aborted.', ConnectionResetError(104, 'Connection reset by peer'))",
        error=ConnectionResetError(104, "Connection reset by peer"),
    ),
    "timeout": ServiceResponseError(
        "Read timed out. (read timeout=30.0)", error=TimeoutError("read timeout")
    ),
}


def log_analytics(answer: str) -> Outcome:
    from se_forwarder.sinks.log_analytics.sink import LogAnalyticsSink

    transport = ScriptedHttpTransport([HTTP.get(answer) or LA_SOCKET[answer], (204, {}, b"")])
    with LogAnalyticsSink(
        "https://dce.ingest.monitor.azure.com",
        "dcr-0",
        FakeCredential(),
        renew_credential=FakeCredential,
        transport=transport,
    ) as sink:
        got = outcome(sink.send, batch())
        if got.verdict is not Verdict.DELIVERED:  # the next attempt: which token does it carry?
            sink.send(batch())
            tokens = [headers["Authorization"] for headers, _ in transport.sent]
            got.renewed = tokens[0] != tokens[1]
    return got


# -- the webhook: an httpx MockTransport ---------------------------------------------------------

WEBHOOK_SOCKET: dict[str, Step] = {  # what httpx's own transport raises
    "connection reset": httpx.ReadError("[Errno 104] Connection reset by peer"),
    "timeout": httpx.ReadTimeout("The read operation timed out"),
}


def webhook(answer: str) -> Outcome:
    from se_forwarder.sinks.webhook.sink import WebhookSink

    sent: list[httpx.Request] = []
    transport = scripted_httpx([HTTP.get(answer) or WEBHOOK_SOCKET[answer]], sent)
    with WebhookSink("https://hooks.example/T/B/secret", transport=transport) as sink:
        got = outcome(sink.send, batch())
    assert len(sent) == 1
    return got


# -- Event Hubs: the SDK's public exceptions through the sink's table and reactions -------------


def event_hubs(answer: str) -> Outcome:
    from se_forwarder.sinks.event_hubs.sink import ANSWERS, EventHubsSink, read_answer

    renewals: list[FakeCredential] = []

    def renew() -> FakeCredential:
        renewals.append(FakeCredential())
        return renewals[-1]

    sink = EventHubsSink(
        "hub",
        namespace="ns.servicebus.windows.net",
        credential=FakeCredential(),
        renew_credential=renew,
    )
    with sink, pytest.raises(DeliveryError) as err, ANSWERS.mapped(read_answer, sink._react):
        raise EVENT_HUBS[answer]()
    return Outcome(err.value.verdict, err.value.retry_after, renewed=bool(renewals))


SINKS = {"log_analytics": log_analytics, "webhook": webhook, "event_hubs": event_hubs}
CASES = [
    (sink, answer)
    for sink in SINKS
    for answer in EXPECTED
    if sink != "event_hubs" or answer in EVENT_HUBS
]


def expected_for(sink: str, answer: str) -> Expected:
    want = EXPECTED[answer]
    if sink == "webhook" and want.without_renewal:  # no credential: the URL itself is refused
        return Expected(want.without_renewal)
    if sink == "event_hubs" and want.retry_after is not None:  # AMQP carries no Retry-After
        return Expected(want.verdict, renews=want.renews)
    return want


@pytest.mark.parametrize("sink,answer", CASES)
def test_every_sink_classifies_every_answer_the_same_way(sink, answer):
    want = expected_for(sink, answer)
    got = SINKS[sink](answer)
    assert (got.verdict, got.retry_after) == (want.verdict, want.retry_after)
    if sink != "webhook" and got.verdict is not Verdict.DELIVERED:
        assert got.renewed == want.renews  # a new credential for exactly the refused ones


def test_the_event_hubs_answers_missing_here_are_the_ones_only_a_peer_gives():
    """Accepted (200/204) and a partial send are an SDK call that returns: the stand-in test has
    them. Every other answer of the list is classified here."""
    assert set(EXPECTED) - set(EVENT_HUBS) == {"200", "204"}


def test_a_webhook_partial_delivery_returns_the_prefix_and_the_rest_s_verdict():
    from se_forwarder.sinks.webhook.sink import WebhookSink

    sent: list[httpx.Request] = []
    transport = scripted_httpx([HTTP["204"], HTTP["200"], HTTP["503 Retry-After: 2"]], sent)
    with WebhookSink("https://hooks.example/T/B/secret", transport=transport) as sink:
        result = sink.send(batch(3))
    assert (result.delivered, result.requests, len(sent)) == (2, 2, 3)
    assert result.failure is not None and result.failure.verdict is Verdict.RETRY
    assert result.failure.retry_after == 2.0


def test_a_log_analytics_batch_is_one_request_so_never_partial():
    """The Logs Ingestion API takes a request whole or not at all: a batch is one request."""
    from se_forwarder.sinks.log_analytics.sink import LogAnalyticsSink

    transport = ScriptedHttpTransport([HTTP["204"], HTTP["503 Retry-After: 2"]])
    with LogAnalyticsSink(
        "https://dce.ingest.monitor.azure.com", "dcr-0", FakeCredential(), transport=transport
    ) as sink:
        result = sink.send(batch(3))
        failed = sink.send(batch(3))
    assert (failed.delivered, failed.failure is not None) == (0, True)
    assert (result.delivered, result.requests) == (3, 1) and len(transport.sent) == 2
    assert result.bytes_sent == len(transport.sent[0][1]) == result.largest_request


def test_a_webhook_404_is_gone_for_good_once_it_has_lasted_its_budget():
    """The webhook's one answer of its own: 404/410 answered for ``gone_after_seconds`` (a time,
    not a count of tries) is dead-lettered (a deleted channel); a 2xx starts the clock again."""
    from se_forwarder.sinks.webhook.sink import WebhookSink
    from se_forwarder_testbed.fakeclock import FakeClock

    sent: list[httpx.Request] = []
    clock = FakeClock()
    script = [
        (0, HTTP["404"]),
        (30, HTTP["410"]),
        (59, HTTP["404"]),
        (60, HTTP["404"]),
        (61, HTTP["204"]),
        (62, HTTP["404"]),
        (100, HTTP["404"]),
    ]
    with WebhookSink(
        "https://hooks.example/T/B/secret",
        gone_after_seconds=60,
        transport=scripted_httpx([a for _, a in script], sent),
        clock=clock,
    ) as sink:
        verdicts, t0 = [], clock.monotonic()
        for at, _ in script:
            clock.advance(t0 + at - clock.monotonic())
            verdicts.append(outcome(sink.send, batch()).verdict)
    assert verdicts == [Verdict.SLOW_RETRY] * 3 + [
        Verdict.DEAD_LETTER,
        Verdict.DELIVERED,
        Verdict.SLOW_RETRY,
        Verdict.SLOW_RETRY,
    ]


def test_every_event_hubs_exception_class_has_a_meaning_of_its_own():
    """httpx's rule for its exception map: every public exception class of the SDK is in the
    table by name, so a new one is a decision, not a fall-through to the base class."""
    import azure.eventhub.exceptions as sdk

    from se_forwarder.sinks.event_hubs.sink import ANSWERS

    public = {
        cls
        for cls in vars(sdk).values()
        if isinstance(cls, type) and issubclass(cls, sdk.EventHubError)
    }
    assert public and public <= set(ANSWERS.entries)


def test_an_answer_no_table_knows_is_a_bug_and_goes_through_with_its_traceback():
    from se_forwarder.sinks.event_hubs.sink import ANSWERS, EventHubsSink, read_answer

    sink = EventHubsSink("hub", namespace="ns.servicebus.windows.net", credential=FakeCredential())
    with sink, pytest.raises(KeyError), ANSWERS.mapped(read_answer, sink._react):
        raise KeyError("Table")
