"""The Event Hubs sink through the real azure-eventhub SDK into the Event Hubs stand-in (AMQP over
TLS), with tokens from the simulator's managed-identity endpoint or a SAS connection string."""

from __future__ import annotations

import json
import logging

import pytest
from helpers import build_sinks
from helpers.azure import HUB, VM_ID, AzureWorld, compact, heartbeat, items, record
from helpers.fake_transports import FakeCredential
from helpers.sink_answers import EVENT_HUBS, EXPECTED, nothing_delivered

from se_forwarder.config import Config
from se_forwarder.errors import Verdict
from se_forwarder.identity.config import IdentityConfig
from se_forwarder.sinks.base import OutboxRow

pytestmark = [pytest.mark.e2e, pytest.mark.tls]


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    with AzureWorld(tmp_path_factory.mktemp("eh")) as w:
        yield w


@pytest.fixture
def eh(world):
    hub = world.eh
    hub.clear()
    hub.clear_faults()
    hub.allowed_subjects = None
    hub.set_max_message_size(1024 * 1024)
    yield hub
    hub.clear_faults()
    hub.allowed_subjects = None
    hub.set_max_message_size(1024 * 1024)


@pytest.fixture
def sink(world, eh):
    s = world.eh_sink(timeout=3.0)
    yield s
    s.close()


def bodies(events) -> list[dict]:
    return [json.loads(e.body) for e in events]


def test_messages_follow_the_contract(sink, eh):
    recs = [
        record(i, Phase=("FirstSeen" if i % 2 else "Removed"), EventType="Freeze")
        for i in range(20)
    ]
    batch = items(recs)
    transfers = eh.stats["transfers"]
    result = sink.send(batch)
    got = eh.wait_for(20, timeout=5)
    assert [e.body for e in got] == [i.payload.encode() for i in batch]  # the record JSON, as is
    for e, r in zip(got, recs, strict=False):
        assert e.content_type == "application/json"
        assert e.properties == {
            "Phase": r["Phase"],
            "EventType": "Freeze",
            "Table": "ScheduledEvents",
        }
        assert e.partition_key == VM_ID
        # each event carries its key itself, as EventData through the SDK's batch does (not
        # only the batch's envelope): what a consumer reads as the event's partition key
        assert e.annotations == {"x-opt-partition-key": VM_ID}
    assert len({e.partition_id for e in got}) == 1  # one VM, one partition: order kept
    assert eh.stats["transfers"] - transfers == 1 == result.requests
    assert result.delivered == 20 and result.failure is None and result.bytes_sent > 0


def test_heartbeats_carry_their_table(sink, eh):
    sink.send(items([heartbeat(1)], table="heartbeats"))
    [e] = eh.wait_for(1, timeout=5)
    assert e.properties == {"Table": "ScheduledEventsAgent"}
    assert json.loads(e.body)["Reason"] == "periodic"


def test_each_partition_key_keeps_its_order(sink, eh):
    a = items([record(i, vm="vm-a") for i in range(5)], key="vm-a")
    b = items([record(i + 5, vm="vm-b") for i in range(5)], start=6, key="vm-b")
    mixed = [a[0], a[1], b[0], a[2], b[1], b[2], b[3], a[3], a[4], b[4]]
    mixed = [
        OutboxRow.raw(x.table, x.partition_key, x.payload, seq=n + 1) for n, x in enumerate(mixed)
    ]
    sink.send(mixed)
    got = eh.wait_for(10, timeout=5)
    for key in ("vm-a", "vm-b"):
        mine = [json.loads(e.body)["RecordId"] for e in got if e.partition_key == key]
        assert mine == [json.loads(x.payload)["RecordId"] for x in mixed if x.partition_key == key]


def test_server_busy_is_retryable_then_delivered(sink, eh):
    sink.send(items([record(0)]))  # link up
    eh.reject_next(5)  # more than the SDK's own single resend
    ei = nothing_delivered(sink.send(items([record(1)], start=2)))
    assert "server-busy" in str(ei.value) and ei.value.verdict is Verdict.RETRY
    eh.clear_faults()
    sink.send(items([record(1)], start=2))
    assert [json.loads(e.body)["RecordId"] for e in eh.events] == [
        record(0)["RecordId"],
        record(1)["RecordId"],
    ]


def test_missing_role_names_data_sender_and_retries_slowly(sink, eh, caplog):
    eh.allowed_subjects = frozenset({"someone-else"})
    with caplog.at_level(logging.ERROR, logger="se_forwarder"):
        ei = nothing_delivered(sink.send(items([record(1)])))
    assert ei.value.verdict is Verdict.SLOW_RETRY
    assert "Azure Event Hubs Data Sender" in str(ei.value) and HUB in str(ei.value)
    lines = [r for r in caplog.records if "refused the identity" in r.getMessage()]
    assert len(lines) == 1 and lines[0].fields["role"] == "Azure Event Hubs Data Sender"
    assert eh.events == []
    eh.allowed_subjects = None
    sink.send(items([record(1)]))
    assert len(eh.events) == 1


def test_an_unknown_identity_retries_slowly(world, eh):
    s = world.eh_sink(identity=IdentityConfig(client_id="00000000-dead-beef-0000-000000000000"))
    try:
        ei = nothing_delivered(s.send(items([record(1)])))
    finally:
        s.close()
    assert ei.value.verdict is Verdict.SLOW_RETRY and eh.events == []


def _cfg(world, **section) -> Config:
    base = {
        "hub": HUB,
        "endpoint": world.eh.endpoint,
        "ca_file": str(world.tls.ca_cert),
        "timeout": 3,
    }
    return Config.model_validate({"sinks": {"event_hubs": {**base, **section}}})


def test_connection_string_from_a_file_is_used_and_never_logged(world, eh, tmp_path, caplog):
    secret = world.eh.connection_string(HUB)
    path = tmp_path / "eh.conn"
    path.write_text(secret + "\n")
    [s] = build_sinks(_cfg(world, connection_string_file=str(path)))
    with caplog.at_level(logging.DEBUG):
        try:
            s.send(items([record(1)]))
        finally:
            s.close()
    assert len(eh.wait_for(1, timeout=5)) == 1
    key = secret.split("SharedAccessKey=")[1].split(";")[0]
    assert all(
        key not in r.getMessage() and key not in str(getattr(r, "fields", ""))
        for r in caplog.records
    )


def test_connection_string_from_an_env_var(world, eh, monkeypatch):
    monkeypatch.setenv("TEST_EH_CONN", world.eh.connection_string(HUB))
    [s] = build_sinks(_cfg(world, connection_string_env="TEST_EH_CONN"))
    try:
        s.send(items([record(1)]))
    finally:
        s.close()
    assert len(eh.wait_for(1, timeout=5)) == 1


def test_a_wrong_sas_key_is_an_auth_error_without_the_key_in_it(world, eh, tmp_path):
    bad = world.eh.connection_string(HUB).replace("SharedAccessKey=", "SharedAccessKey=AAAA")
    path = tmp_path / "bad.conn"
    path.write_text(bad)
    [s] = build_sinks(_cfg(world, connection_string_file=str(path)))
    try:
        ei = nothing_delivered(s.send(items([record(1)])))
    finally:
        s.close()
    # the key is refused (401) and a connection string cannot be renewed: a person must fix it
    assert ei.value.verdict is Verdict.SLOW_RETRY and "Data Sender" in str(ei.value)
    assert bad.split("SharedAccessKey=")[1] not in str(ei.value)
    assert eh.events == []


def test_missing_connection_string_env_is_a_clear_build_error(world, monkeypatch):
    monkeypatch.delenv("TEST_EH_NOPE", raising=False)
    with pytest.raises(ValueError, match="TEST_EH_NOPE"):
        build_sinks(_cfg(world, connection_string_env="TEST_EH_NOPE"))


def test_the_link_size_bounds_transfers_and_the_limits_stay_as_built(world, eh):
    eh.set_max_message_size(8 * 1024)
    s = world.eh_sink()
    try:
        limits = s.limits
        recs = [record(i) for i in range(30)]  # ~1.2 KB each: several transfers of <= 8 KB
        result = s.send(items(recs))
        assert s.limits == limits  # the worker's limits are the sink's as built
        assert result.delivered == 30 and result.requests > 1 and result.largest_request <= 8 * 1024
        got = eh.wait_for(30, timeout=5)
        assert [json.loads(e.body)["RecordId"] for e in got] == [r["RecordId"] for r in recs]
        big = items([record(99, Description="x" * 9000)], start=100)
        ei = nothing_delivered(s.send(big))  # no retry can make it fit this link
        assert ei.value.verdict is Verdict.REJECT and "does not fit" in str(ei.value)
    finally:
        s.close()


def test_a_partial_send_says_how_far_it_got_and_the_rest_completes_the_batch(world, eh):
    """Transfer 1 of a batch is Accepted, transfer 2 fails: the sink returns what was delivered
    (the worker acknowledges that prefix) with the failure of the rest; sending the rest
    completes the batch with no duplicate and nothing missing."""
    eh.set_max_message_size(8 * 1024)
    s = world.eh_sink()
    try:
        s.send(items([record(0)]))  # link up, size learned
        batch = items([record(i) for i in range(1, 21)], start=2)
        # The SDK's send_batch is wrapped only to arm the stand-in's fault between transfers:
        # transfer 1 goes through, the following ones are rejected (server-busy) by the stand-in.
        original = s._client().send_batch
        calls = {"n": 0}

        def count_only(edb, **kw):
            calls["n"] += 1
            if calls["n"] == 2:
                eh.reject_next(5)
            return original(edb, **kw)

        s._producer.send_batch = count_only
        result = s.send(batch)
        assert result.failure is not None and result.failure.verdict is Verdict.RETRY
        assert result.requests == 1 and 0 < result.delivered < len(batch)
        first = [json.loads(e.body)["RecordId"] for e in eh.events]
        assert len(first) == 1 + result.delivered
        eh.clear_faults()
        s.send(batch[result.delivered :])
        got = [json.loads(e.body)["RecordId"] for e in eh.events]
    finally:
        s.close()
    want = [record(i)["RecordId"] for i in range(21)]
    assert 1 < len(first) < 21
    assert got == want  # no duplicate of the accepted part, nothing missing, in order


# How the stand-in gives each answer of the conformance list (helpers.sink_answers).
STANDIN_FAULTS = {
    "400": lambda eh: eh.reject_next(5, "com.microsoft:argument-error"),
    "410": lambda eh: eh.reject_next(5, "amqp:not-found"),
    "413": lambda eh: eh.reject_next(5, "amqp:link:message-size-exceeded"),
    "429 Retry-After: 7": lambda eh: eh.reject_next(5),
    "500": lambda eh: eh.reject_next(5, "amqp:internal-error"),
    "503 Retry-After: 2": lambda eh: eh.reject_next(5),
    "connection reset": lambda eh: eh.drop_next(5),
    "timeout": lambda eh: eh.set_accept_delay(2.5),
}


@pytest.mark.parametrize("answer", ["204", "401", "403", "404", *STANDIN_FAULTS])
def test_the_sdk_raises_what_the_conformance_suite_classifies(world, eh, answer):
    """Each answer of the conformance list, given by the stand-in over AMQP: the sink's verdict is
    the list's, and the SDK exception it came from has the class and the AMQP condition (``error``)
    of the one the fast suite (test_conformance.py) builds for it."""
    from se_forwarder.identity import credential as ident

    # A short deadline only where the answer is the deadline: elsewhere a refusal that reaches the
    # sink late (a loaded machine: the stand-in's answer after ``timeout``) is, rightly, a timeout
    # (RETRY), which is the machine's speed, not the classification this test is about.
    kw: dict = {"timeout": 1.0 if answer == "timeout" else 30.0}
    if answer == "401":  # a token the hub refuses, then the identity's own
        kw.update(
            credential=FakeCredential(), renew_credential=lambda: ident.build(IdentityConfig())
        )
    if answer == "404":
        kw.update(hub="no-such-hub")
    if answer == "403":  # a link attach refused: no Send claim for this identity
        eh.allowed_subjects = frozenset({"someone-else"})
    with world.eh_sink(**kw) as s:
        if answer in STANDIN_FAULTS:  # faults of a transfer on a link that is up
            s.send(items([record(0)]))
            STANDIN_FAULTS[answer](eh)
        result = s.send(items([record(1)], start=2))
        if (exc := result.failure) is not None:
            assert result.delivered == 0
            verdict, cause, said = exc.verdict, exc.__cause__, str(exc)
        else:
            verdict, cause, said = Verdict.DELIVERED, None, ""
        if answer == "401":
            assert s.send(items([record(1)], start=2)).delivered == 1  # with the renewed credential
    timed_out = answer == "timeout" and "no answer within 2 s: connection closed" in said
    if answer in EVENT_HUBS and not timed_out:  # the SDK's exception first: the verdict's input
        fake = EVENT_HUBS[answer]()
        assert (type(cause), getattr(cause, "error", None)) == (type(fake), fake.error), said
    assert verdict is EXPECTED[answer].verdict


def test_compact_payloads_are_sent_byte_for_byte(sink, eh):
    r = record(1, Description="caf\u00e9")
    sink.send([OutboxRow.raw("records", VM_ID, compact(r), seq=1)])
    [e] = eh.wait_for(1, timeout=5)
    assert e.body == compact(r).encode("utf-8")


def test_a_batch_prepared_ahead_goes_out_as_prepared_and_only_for_its_own_rows(
    world, eh, monkeypatch
):
    """With a backlog the worker hands the sink its next batch while one is sent (``prepare``):
    that batch goes out as prepared (no event encoded again), the same events as an unprepared
    send; a prepared batch serves only the very rows it was built from (a batch formed again
    from the outbox is encoded anew), and once (a retry after a failure encodes anew)."""
    from azure.eventhub import EventDataBatch

    encoded: list[int] = []
    real_add = EventDataBatch.add

    def counting_add(self, event):
        encoded.append(1)
        return real_add(self, event)

    s = world.eh_sink(timeout=3.0)
    try:
        s.send(items([record(0)]))  # the link is up: its size known
        a = items([record(i, Phase="Started") for i in range(1, 11)], start=2)
        b = items([record(i) for i in range(11, 21)], start=12)
        s.prepare(a)
        s.prepare(b)
        monkeypatch.setattr(EventDataBatch, "add", counting_add)
        assert s.send(a).delivered == 10 and s.send(b).delivered == 10
        assert encoded == []  # both went out as prepared
        # the same seqs read again, other rows: never the prepared events
        s.prepare(items([record(i) for i in range(21, 31)], start=22))
        again = items([record(i, Phase="Removed") for i in range(21, 31)], start=22)
        encoded.clear()
        assert s.send(again).delivered == 10 and len(encoded) == 10
        c = items([record(i) for i in range(31, 36)], start=32)
        s.prepare(c)
        eh.reject_next(5)
        encoded.clear()
        assert s.send(c).failure is not None and encoded == []  # sent as prepared, refused
        eh.clear_faults()
        assert s.send(c).delivered == 5 and len(encoded) == 5  # the retry encoded anew
    finally:
        s.close()
    got = eh.wait_for(36, timeout=5)
    assert [json.loads(e.body)["RecordId"] for e in got] == [
        json.loads(x.payload)["RecordId"] for x in items([record(0)]) + a + b + again + c
    ]
    assert [e.properties["Phase"] for e in got[1:11]] == ["Started"] * 10
    assert [e.properties["Phase"] for e in got[21:31]] == ["Removed"] * 10
    assert all(
        e.content_type == "application/json" and e.annotations == {"x-opt-partition-key": VM_ID}
        for e in got
    )
