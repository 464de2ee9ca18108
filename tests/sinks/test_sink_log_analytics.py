"""The Log Analytics sink through the real azure-monitor-ingestion SDK into the Logs Ingestion
stand-in, with tokens from the simulator's managed-identity endpoint."""

from __future__ import annotations

import logging
import random
import string

import pytest
from helpers import build_sinks
from helpers.azure import HEARTBEATS, RECORDS, AzureWorld, compact, heartbeat, items, record
from helpers.sink_answers import nothing_delivered

from se_forwarder.backoff import parse_retry_after as _retry_after
from se_forwarder.config import Config
from se_forwarder.errors import Verdict
from se_forwarder.identity.config import IdentityConfig
from se_forwarder.sinks.base import OutboxRow
from se_forwarder.sinks.log_analytics.sink import MAX_REQUEST_BYTES, LogAnalyticsSink
from se_forwarder_testbed.simulator.scenario import IdentitySpec, Scenario

pytestmark = [pytest.mark.e2e, pytest.mark.tls]

USER_CLIENT_ID = "11111111-2222-3333-4444-555555555555"


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    scenario = Scenario(
        identities=[
            IdentitySpec(
                client_id=USER_CLIENT_ID, object_id="oid-1", resource_id="/subscriptions/s/rg/id-1"
            )
        ]
    )
    with AzureWorld(tmp_path_factory.mktemp("la"), eventhubs=False, scenario=scenario) as w:
        yield w


@pytest.fixture
def la(world):
    world.la.reset()
    world.la.set_allowed_subjects(None)
    yield world.la
    world.la.reset()
    world.la.set_allowed_subjects(None)


@pytest.fixture
def sink(world, la):
    s = world.la_sink(timeout=2.0)
    yield s
    s.close()


def test_a_batch_is_one_gzip_request_and_lands_intact(sink, la):
    recs = [record(i) for i in range(50)]
    result = sink.send(items(recs))
    assert la.records(RECORDS) == recs
    hist = la.history()
    assert len(hist) == 1 and hist[0].status == 204 and hist[0].encoding == "gzip"
    assert hist[0].records == 50 and hist[0].subject == "system-assigned"
    assert (result.delivered, result.requests, result.failure) == (50, 1, None)
    assert result.bytes_sent == result.largest_request == hist[0].compressed


def test_heartbeats_go_to_the_agent_stream(sink, la):
    sink.send(items([heartbeat(1), heartbeat(2)], table="heartbeats"))
    assert [h["RecordId"] for h in la.records(HEARTBEATS)] == [
        heartbeat(1)["RecordId"],
        heartbeat(2)["RecordId"],
    ]
    assert la.records(RECORDS) == []


@pytest.mark.parametrize("header,expected", [("7", 7.0), ("0.5", 0.5), (None, None)])
def test_429_is_retryable_with_the_services_retry_after(sink, la, header, expected):
    la.throttle_next(1, retry_after=header)
    ei = nothing_delivered(sink.send(items([record(1)])))
    assert ei.value.retry_after == expected and ei.value.verdict is Verdict.RETRY
    assert "429" in str(ei.value)
    # azure-core's retry is off: exactly one request, nothing stored; the worker decides
    assert [h.status for h in la.history()] == [429]
    assert la.records(RECORDS) == []


def test_retry_after_headers_in_milliseconds_win_and_dates_are_understood():
    assert _retry_after({"retry-after-ms": "1500", "Retry-After": "9"}) == 1.5
    assert _retry_after({"x-ms-retry-after-ms": "250"}) == 0.25
    assert _retry_after({"Retry-After": "3"}) == 3.0
    assert _retry_after({"Retry-After": "Wed, 21 Oct 2015 07:28:00 GMT"}) == 0.0  # in the past
    assert _retry_after({}) is None


@pytest.mark.parametrize("status", [500, 502, 503, 504, 408])
def test_server_errors_are_retryable_and_not_retried_inside_the_sdk(sink, la, status):
    la.fail_next(1, status)
    ei = nothing_delivered(sink.send(items([record(1)])))
    assert str(status) in str(ei.value) and ei.value.verdict is Verdict.RETRY
    assert [h.status for h in la.history()] == [status]
    sink.send(items([record(1)]))  # the same batch again: now accepted
    assert len(la.records(RECORDS)) == 1


def test_413_asks_the_worker_to_split(sink, la):
    la.fail_next(1, 413)
    ei = nothing_delivered(sink.send(items([record(i) for i in range(4)])))
    assert ei.value.verdict is Verdict.SPLIT


def test_400_schema_complaint_is_rejected_with_the_services_message(sink, la):
    bad = [record(1), record(2, Bogus=1)]
    ei = nothing_delivered(sink.send(items(bad)))
    assert (
        ei.value.verdict is Verdict.REJECT
        and "Bogus" in str(ei.value)
        and "Record 1" in str(ei.value)
    )
    assert la.records(RECORDS) == []


def test_a_stream_missing_from_the_dcr_keeps_the_records_and_retries_slowly(world, la, caplog):
    # A configuration error, not a bad batch: dead-lettering would empty the outbox into the file.
    s = world.la_sink(timeout=2.0, records_stream="Custom-NotInTheRule")
    try:
        with caplog.at_level(logging.ERROR, logger="se_forwarder"):
            ei = nothing_delivered(s.send(items([record(1)])))
    finally:
        s.close()
    assert ei.value.verdict is Verdict.SLOW_RETRY and "Custom-NotInTheRule" in str(ei.value)
    assert any("stream not declared" in r.getMessage() for r in caplog.records)
    assert la.records(RECORDS) == []


def test_403_names_the_missing_role_and_retries_slowly(sink, la, caplog):
    la.set_allowed_subjects({"someone-else"})
    with caplog.at_level(logging.ERROR, logger="se_forwarder"):
        ei = nothing_delivered(sink.send(items([record(1)])))
    assert ei.value.verdict is Verdict.SLOW_RETRY
    assert "Monitoring Metrics Publisher" in str(ei.value) and la.dcr_id in str(ei.value)
    lines = [r for r in caplog.records if "refused the identity" in r.getMessage()]
    assert len(lines) == 1 and lines[0].fields["role"] == "Monitoring Metrics Publisher"
    la.set_allowed_subjects({"system-assigned"})
    sink.send(items([record(1)]))
    assert len(la.records(RECORDS)) == 1


def token_requests(world) -> int:
    return sum(1 for r in world.sim.requests if "/oauth2/token" in r.path)


def test_401_gets_a_new_token_and_retries_on_the_ordinary_schedule(world, sink, la):
    """A refused token is not a missing role: a fresh token, and the backlog moves at once."""
    sink.send(items([record(0)]))  # a token in hand
    before = token_requests(world)
    la.fail_next(1, 401)
    ei = nothing_delivered(sink.send(items([record(1)])))
    assert ei.value.verdict is Verdict.RETRY and "401" in str(ei.value)
    assert "Monitoring Metrics Publisher" not in str(ei.value)  # not taken for a missing role
    sink.send(items([record(1)]))
    assert token_requests(world) == before + 1  # the retry used a newly fetched token
    assert len(la.records(RECORDS)) == 2


def test_user_assigned_identity_by_client_id(world, la):
    la.set_allowed_subjects({USER_CLIENT_ID})
    system = world.la_sink()
    user = world.la_sink(identity=IdentityConfig(client_id=USER_CLIENT_ID))
    try:
        nothing_delivered(system.send(items([record(1)])))
        user.send(items([record(1)]))
    finally:
        system.close()
        user.close()
    assert [h.subject for h in la.history()] == ["system-assigned", USER_CLIENT_ID]
    assert len(la.records(RECORDS)) == 1


def test_default_azure_credential_is_an_opt_in_that_works(world, la):
    """kind = "default": DefaultAzureCredential, here finding the (simulated) managed identity."""
    s = world.la_sink(identity=IdentityConfig(kind="default"))
    try:
        assert type(s._credential).__name__ == "DefaultAzureCredential"
        s.send(items([record(1)]))
    finally:
        s.close()
    assert la.history()[0].subject == "system-assigned" and len(la.records(RECORDS)) == 1


def test_an_unknown_identity_gets_no_token_and_retries_slowly(world, la):
    s = world.la_sink(identity=IdentityConfig(client_id="00000000-dead-beef-0000-000000000000"))
    try:
        ei = nothing_delivered(s.send(items([record(1)])))
    finally:
        s.close()
    assert ei.value.verdict is Verdict.SLOW_RETRY and "token" in str(ei.value)
    assert la.history() == []  # never reached the service


def test_dropped_connection_is_retryable_and_nothing_is_stored(sink, la):
    la.drop_next(1)
    ei = nothing_delivered(sink.send(items([record(1)])))
    assert ei.value.verdict is Verdict.RETRY
    assert la.records(RECORDS) == []
    assert [h.status for h in la.history()] == [0]


def test_a_slow_answer_times_out_as_retryable(sink, la):
    la.delay_next(1, seconds=3.5)  # longer than the sink's 2 s timeout
    ei = nothing_delivered(sink.send(items([record(1)])))
    assert ei.value.verdict is Verdict.RETRY
    # the stand-in stored it before answering: a lost confirmation (the duplicate case)
    assert len(la.records(RECORDS)) == 1


def test_service_unreachable_is_retryable(world):
    from se_forwarder.identity import credential as identity

    s = LogAnalyticsSink(
        "https://localhost:1",
        world.la.dcr_id,
        identity.build(IdentityConfig()),
        ca_file=str(world.la.ca_cert),
        timeout=2.0,
    )
    with s:
        ei = nothing_delivered(s.send(items([record(1)])))
    assert ei.value.verdict is Verdict.RETRY and "not reached" in str(ei.value)


def _random_text(n: int, rng: random.Random) -> str:
    return "".join(rng.choices(string.ascii_letters + string.digits, k=n))


def test_requests_stay_within_1_mb_compressed_and_uncompressed(sink, la):
    """Poorly compressible records filling the byte limit: one request, both sizes <= 1 MB."""
    rng = random.Random(7)
    recs, size = [], 2
    while True:
        r = record(len(recs), Description=_random_text(3000, rng))
        n = len(compact(r).encode()) + 1
        if size + n > sink.limits.max_bytes:
            break
        recs.append(r)
        size += n
    result = sink.send(items(recs))
    st = la.stats(RECORDS)
    assert st.requests == 1 == result.requests and st.records == len(recs)
    assert st.max_uncompressed <= MAX_REQUEST_BYTES and st.max_compressed <= MAX_REQUEST_BYTES
    assert st.max_uncompressed > 0.95 * MAX_REQUEST_BYTES  # the limit is used, not wasted


def test_a_batch_over_the_limit_is_never_sent(sink, la):
    recs = [record(i, Description="x" * 20_000) for i in range(60)]  # ~1.3 MB
    ei = nothing_delivered(sink.send(items(recs)))
    assert ei.value.verdict is Verdict.SPLIT
    assert la.history() == []


def test_records_that_can_never_fit_are_refused_by_the_one_size_rule_or_a_field_rule(sink):
    ok = items([record(1, Description="y" * 60_000)])[0]
    long_field = items([record(2, Description="y" * (64 * 1024 + 1))])[0]
    long_dynamic = items([record(3, Resources=["r" * 40_000, "s" * 40_000])])[0]
    huge = OutboxRow.raw("records", "k", compact(record(4, Description="z" * 1_000_000)), seq=4)
    assert sink.reject_reason(ok) is None and sink.limits.too_large(ok) is None
    assert "Description" in sink.reject_reason(long_field)
    assert "Resources" in sink.reject_reason(long_dynamic)
    assert "over the 999998-byte limit" in sink.limits.too_large(huge)  # one request at most


def test_built_from_config_by_the_factory(world, la):
    cfg = Config.model_validate(
        {
            "sinks": {
                "log_analytics": {
                    "endpoint": world.la.endpoint,
                    "dcr_immutable_id": world.la.dcr_id,
                    "ca_file": str(world.la.ca_cert),
                    "max_bytes": 200_000,
                    "linger_seconds": 0.1,
                }
            }
        }
    )
    [s] = build_sinks(cfg)
    try:
        assert isinstance(s, LogAnalyticsSink)
        assert s.limits.max_bytes == 200_000 and s.limits.linger_seconds == 0.1
        s.send(items([record(1)]))
        s.send(items([heartbeat(1)], table="heartbeats", start=2))
    finally:
        s.close()
    assert len(la.records(RECORDS)) == 1 and len(la.records(HEARTBEATS)) == 1
    # the configured byte limit can only lower the service limit, never raise it
    cfg2 = Config.model_validate(
        {
            "sinks": {
                "log_analytics": {
                    "endpoint": world.la.endpoint,
                    "dcr_immutable_id": world.la.dcr_id,
                    "max_bytes": 5_000_000,
                }
            }
        }
    )
    [s2] = build_sinks(cfg2)
    s2.close()
    assert s2.limits.max_bytes == MAX_REQUEST_BYTES


def test_the_body_is_the_records_own_json(sink, la):
    """What arrives is byte-for-byte the outbox payloads (no re-serialisation)."""
    recs = [record(1, Description="caf\u00e9 \u2603")]
    batch = items(recs)
    result = sink.send(batch)
    assert la.records(RECORDS) == recs
    body = ("[" + batch[0].payload + "]").encode()
    assert la.history()[0].uncompressed == len(body)
    assert la.history()[0].compressed == result.bytes_sent < len(body)
