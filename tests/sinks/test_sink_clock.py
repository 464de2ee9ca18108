"""Every sink reads the agent's clock: the one ``SinkContext`` carries it from the registry into
each sink and what the sink builds (the webhook's "gone after", Retry-After dates, the bounded
transport's deadline, the Event Hubs transfer deadline), so the test bed's ``FakeClock`` drives
them all. Each test moves fake time past a bound far beyond what the test waits in real time."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime
from email.utils import format_datetime

import pytest
from helpers.azure import AzureWorld, items, record
from helpers.fake_transports import FakeCredential, ScriptedHttpTransport, scripted_httpx
from helpers.hostile_http import HostilePeer

from se_forwarder.backoff import parse_retry_after
from se_forwarder.config import load
from se_forwarder.errors import Verdict
from se_forwarder.outbox import OutboxRow
from se_forwarder.sinks import registry
from se_forwarder.sinks.base import SendResult, SinkContext
from se_forwarder_testbed.fakeclock import FakeClock
from se_forwarder_testbed.standins.tls import generate
from se_forwarder_testbed.standins.webhooks import WebhookStandIn

FAR = 600.0  # a bound in seconds: fake time passes it, the test never waits for it


def row(seq: int = 1) -> OutboxRow:
    return OutboxRow.raw("records", "vm-a", '{"RecordId":"r-1","Phase":"FirstSeen"}', seq=seq)


def http_date(clock: FakeClock, seconds: float) -> str:
    """An HTTP date ``seconds`` after the clock's now."""
    return format_datetime(datetime.fromtimestamp(clock.wall_seconds() + seconds, UTC), usegmt=True)


def in_thread(fn) -> tuple[threading.Thread, list]:
    out: list = []
    thread = threading.Thread(target=lambda: out.append(fn()), daemon=True)
    thread.start()
    return thread, out


def advance_until_done(clock: FakeClock, thread: threading.Thread, fake: float, real: float):
    """Move fake time in steps until ``thread`` ends, for at most ``fake`` fake seconds and
    ``real`` real ones; the real seconds it took."""
    t0 = time.monotonic()
    moved = 0.0
    while thread.is_alive() and moved < fake and time.monotonic() - t0 < real:
        clock.advance(30)
        moved += 30
        thread.join(0.05)
    thread.join(max(0.0, real - (time.monotonic() - t0)))
    assert not thread.is_alive(), f"still sending after {moved:g} fake seconds"
    return time.monotonic() - t0


# -- the context reaches every sink --------------------------------------------------------------


def test_the_registry_gives_every_sink_the_contexts_clock(tmp_path):
    (tmp_path / "hook.url").write_text("https://hooks.example/T/B/secret\n")
    cfg = load(
        None,
        env={
            "SE_FORWARDER_SINKS__FILE__PATH": str(tmp_path / "r.jsonl"),
            "SE_FORWARDER_SINKS__WEBHOOK__URL_FILE": str(tmp_path / "hook.url"),
            "SE_FORWARDER_SINKS__LOG_ANALYTICS__ENDPOINT": "https://dce.example",
            "SE_FORWARDER_SINKS__LOG_ANALYTICS__DCR_IMMUTABLE_ID": "dcr-0",
            "SE_FORWARDER_SINKS__EVENT_HUBS__NAMESPACE": "ns.servicebus.windows.net",
            "SE_FORWARDER_SINKS__EVENT_HUBS__HUB": "hub",
            "SE_FORWARDER_IDENTITY__TOKEN_ENDPOINT": "http://127.0.0.1:9",
        },
    )
    clock = FakeClock()
    sinks = {s.name: s for s in registry.build(cfg.sinks, SinkContext.of(cfg, clock))}
    try:
        assert sinks["webhook"].clock is clock
        assert sinks["log_analytics"].clock is clock
        assert sinks["event_hubs"].bound.clock is clock
    finally:
        for s in sinks.values():
            s.close()


# -- Retry-After dates ---------------------------------------------------------------------------


def test_a_retry_after_date_is_read_on_the_injected_clock():
    clock = FakeClock()  # 2026-03-01: long past on the real clock
    date = http_date(clock, 30)
    assert parse_retry_after({"Retry-After": date}, clock) == 30.0
    assert parse_retry_after({"Retry-After": date}) == 0.0  # the real clock: in the past


def test_log_analytics_reads_a_retry_after_date_on_its_clock():
    from se_forwarder.sinks.log_analytics.sink import LogAnalyticsSink

    clock = FakeClock()
    transport = ScriptedHttpTransport([(503, {"Retry-After": http_date(clock, 30)}, b"")])
    with LogAnalyticsSink(
        "https://dce.example", "dcr-0", FakeCredential(), transport=transport, clock=clock
    ) as sink:
        result: SendResult = sink.send([row()])
    assert result.failure is not None and result.failure.retry_after == 30.0


def test_the_webhook_reads_a_retry_after_date_on_its_clock():
    from se_forwarder.sinks.webhook.sink import WebhookSink

    clock = FakeClock()
    transport = scripted_httpx([(429, {"Retry-After": http_date(clock, 30)}, b"")], [])
    with WebhookSink("https://hooks.example/T/B/x", transport=transport, clock=clock) as sink:
        result = sink.send([row()])
    assert result.failure is not None and result.failure.retry_after == 30.0


# -- the webhook's "gone after", built from the context ------------------------------------------


@pytest.mark.e2e
def test_the_webhooks_gone_after_runs_on_the_contexts_clock(tmp_path):
    with WebhookStandIn(tmp_path / "tls") as hooks:
        (tmp_path / "hook.url").write_text(hooks.url("slack") + "\n")
        cfg = load(
            None,
            env={
                "SE_FORWARDER_SINKS__WEBHOOK__URL_FILE": str(tmp_path / "hook.url"),
                "SE_FORWARDER_SINKS__WEBHOOK__CA_FILE": str(hooks.ca_cert),
                "SE_FORWARDER_SINKS__WEBHOOK__FORMAT": "slack",
            },
        )
        assert cfg.sinks.webhook.gone_after_seconds == 3600
        clock = FakeClock()
        [sink] = registry.build(cfg.sinks, SinkContext.of(cfg, clock))
        hooks.answer_all(410)
        with sink:
            first = sink.send([row()]).failure
            clock.advance(3600)  # an hour of 410s, in no real time
            then = sink.send([row()]).failure
    assert first is not None and first.verdict is Verdict.SLOW_RETRY
    assert then is not None and then.verdict is Verdict.DEAD_LETTER and "gone" in str(then)


# -- deadlines of the Azure peers ----------------------------------------------------------------


@pytest.mark.e2e
@pytest.mark.tls
def test_the_bounded_transports_deadline_runs_on_the_sinks_clock(tmp_path):
    """A Logs Ingestion answer trickled forever ends at the sink's deadline in fake time: 600 s
    of it pass in well under the real seconds the peer keeps trickling."""
    from se_forwarder.sinks.log_analytics.sink import LogAnalyticsSink

    tls = generate(tmp_path / "tls")
    clock = FakeClock()
    with HostilePeer("trickle-body", tls=tls, give_up_after=64 * 1024 * 1024) as peer:
        sink = LogAnalyticsSink(
            peer.base,
            "dcr-x",
            FakeCredential(),
            ca_file=str(tls.ca_cert),
            timeout=FAR,
            clock=clock,
        )
        try:
            thread, out = in_thread(lambda: sink.send([row()]))
            seconds = advance_until_done(clock, thread, fake=FAR + 60, real=30)
        finally:
            sink.close()
    [result] = out
    assert result.failure is not None and result.failure.verdict is Verdict.RETRY, result
    assert seconds < 30


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    with AzureWorld(tmp_path_factory.mktemp("eh-clock")) as w:
        yield w


@pytest.mark.e2e
@pytest.mark.tls
def test_the_event_hubs_transfer_deadline_runs_on_the_sinks_clock(world):
    """A peer that never answers: the transfer's deadline (timeout + 1 s) passes in fake time and
    shuts the producer's sockets; the SDK's own timeouts (the same 600 s, real) never come."""
    world.eh.clear_faults()
    world.eh.hostile_next("silent", 5)
    clock = FakeClock()
    sink = world.eh_sink(timeout=FAR, clock=clock)
    try:
        thread, out = in_thread(lambda: sink.send(items([record(1)])))
        seconds = advance_until_done(clock, thread, fake=FAR + 60, real=30)
    finally:
        world.eh.clear_faults()
        closing = threading.Thread(target=sink.close, daemon=True)
        closing.start()
        closing.join(10)
    [result] = out
    assert result.failure is not None and result.failure.verdict is Verdict.RETRY, result
    assert f"no answer within {FAR + 1:g} s" in str(result.failure)
    assert seconds < 30
