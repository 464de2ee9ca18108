"""The Event Hubs stand-in's receive side, driven by the real ``EventHubConsumerClient``
(azure-eventhub 5.15.1, pure-Python AMQP): what a consumer reads, from where, and the rules the
service holds readers to."""

from __future__ import annotations

import datetime as dt
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from azure.core.credentials import AccessToken
from azure.eventhub import EventData, EventHubConsumerClient, EventHubProducerClient

from se_forwarder_testbed.standins.eventhubs import EventHubsStandIn
from se_forwarder_testbed.standins.tokens import EVENTHUBS_AUDIENCE, TokenAuthority

pytestmark = [pytest.mark.e2e, pytest.mark.tls]

HUB = "platform"
GROUP = "collector"


@pytest.fixture
def standin(authority: TokenAuthority) -> Iterator[EventHubsStandIn]:
    """A fresh namespace per test: sequence numbers and offsets start at 0."""
    with EventHubsStandIn(
        hubs={HUB: 2},
        consumer_groups={HUB: [GROUP]},
        token_authority=authority,
        receiver_subjects={"reader"},
    ) as s:
        yield s
        assert s.errors == []


@dataclass
class Run:
    """One consumer client receiving in a thread: what it got and the errors it reported."""

    client: EventHubConsumerClient
    events: list[Any] = field(default_factory=list)
    errors: list[Exception] = field(default_factory=list)
    contexts: list[Any] = field(default_factory=list)
    thread: threading.Thread | None = None

    def wait(self, n: int, timeout: float = 30.0) -> list[Any]:
        deadline = time.monotonic() + timeout
        while len(self.events) < n and time.monotonic() < deadline:
            time.sleep(0.05)
        return self.events

    def wait_error(self, timeout: float = 15.0) -> Exception:
        deadline = time.monotonic() + timeout
        while not self.errors and time.monotonic() < deadline:
            time.sleep(0.05)
        assert self.errors, "no error reported"
        return self.errors[0]


@pytest.fixture
def consume(standin: EventHubsStandIn) -> Iterator[Any]:
    runs: list[Run] = []

    def start(
        group: str = GROUP,
        partition_id: str | None = "0",
        *,
        credential: Any = None,
        **receive_kw: Any,
    ) -> Run:
        kw: dict[str, Any] = {"consumer_group": group, "retry_total": 0}
        if credential is None:
            client = EventHubConsumerClient.from_connection_string(
                standin.connection_string(HUB), **kw
            )
        else:
            client = EventHubConsumerClient(
                standin.namespace, HUB, credential=credential, use_tls=False, **kw
            )
        run = Run(client)

        def on_event(ctx: Any, event: Any) -> None:
            run.events.append(event)
            run.contexts.append(ctx)

        def on_error(ctx: Any, exc: Exception) -> None:
            run.errors.append(exc)

        receive_kw.setdefault("starting_position", "-1")
        if partition_id is not None:
            receive_kw["partition_id"] = partition_id
        run.thread = threading.Thread(
            target=client.receive,
            daemon=True,
            kwargs=dict(on_event=on_event, on_error=on_error, **receive_kw),
        )
        run.thread.start()
        runs.append(run)
        return run

    yield start
    for run in runs:  # all closed first, then waited for: their receive loops end together
        run.client.close()
    for run in runs:
        if run.thread is not None:
            run.thread.join(10)


def wait_attached(standin: EventHubsStandIn, receivers: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while standin.stats["receivers"] < receivers and time.monotonic() < deadline:
        time.sleep(0.02)
    assert standin.stats["receivers"] >= receivers, standin.stats


def send(standin: EventHubsStandIn, bodies: list[str], partition_id: str = "0") -> None:
    producer = EventHubProducerClient.from_connection_string(standin.connection_string(HUB))
    with producer:
        batch = producer.create_batch(partition_id=partition_id)
        for b in bodies:
            batch.add(EventData(b))
        producer.send_batch(batch)


def enqueue(standin: EventHubsStandIn, bodies: list[str]) -> None:
    """Events already in partition 0, as any publisher leaves them: the tests of where a reader
    starts need them there, not the producer's path (its own test, the next), which costs a client's
    AMQP handshake, a second and more."""
    for body in bodies:
        standin.inject(HUB, body, partition=0)


def test_consumer_reads_what_the_producer_sent_and_what_was_injected(standin, consume):
    send(standin, ["a", "bb", "ccc"])
    standin.inject(
        HUB, '[{"id": "eg-1"}]', partition=0, properties={"aeg-event-type": "Notification"}
    )
    run = consume()
    got = run.wait(4)
    assert [e.body_as_str() for e in got] == ["a", "bb", "ccc", '[{"id": "eg-1"}]']
    assert [e.sequence_number for e in got] == [0, 1, 2, 3]
    offsets = [int(e.offset) for e in got]
    assert offsets[0] == 0 and offsets == sorted(offsets) and offsets[1] > 1  # byte positions
    assert all(isinstance(e.enqueued_time, dt.datetime) for e in got)
    assert got[3].properties == {b"aeg-event-type": b"Notification"}
    assert got[3].content_type == "application/json"
    standin.inject(HUB, "later", partition=0)  # a live reader gets new events at once
    assert [e.body_as_str() for e in run.wait(5)][-1] == "later"


def test_partition_key_and_partition_properties(standin, consume):
    standin.inject(HUB, "keyed", partition_key="vm-1")
    pid = standin.events[-1].partition_id
    run = consume(partition_id=pid)
    (event,) = run.wait(1)
    assert event.partition_key == b"vm-1"
    props = run.client.get_partition_properties(pid)
    assert props["last_enqueued_sequence_number"] == 0 and not props["is_empty"]
    assert props["last_enqueued_offset"] == event.offset
    assert run.client.get_partition_ids() == ["0", "1"]


@pytest.mark.parametrize(
    "position,inclusive,expected",
    [
        (1, False, ["e2", "e3"]),
        (1, True, ["e1", "e2", "e3"]),
        ("-1", False, ["e0", "e1", "e2", "e3"]),
    ],
)
def test_starting_positions_by_sequence_number(standin, consume, position, inclusive, expected):
    enqueue(standin, ["e0", "e1", "e2", "e3"])
    run = consume(starting_position=position, starting_position_inclusive=inclusive)
    assert [e.body_as_str() for e in run.wait(len(expected))] == expected
    time.sleep(0.3)
    assert len(run.events) == len(expected)


def test_starting_position_by_offset_and_by_time(standin, consume):
    enqueue(standin, ["e0", "e1", "e2"])
    first = standin.events_for(HUB, 0)
    run = consume(starting_position=str(first[1].offset))
    assert [e.body_as_str() for e in run.wait(1)] == ["e2"]
    time.sleep(0.05)
    cut = dt.datetime.now(dt.UTC)
    time.sleep(0.05)
    standin.inject(HUB, "after", partition=0)
    timed = consume(starting_position=cut)
    assert [e.body_as_str() for e in timed.wait(1)] == ["after"]


def test_latest_reads_only_new_events(standin, consume):
    enqueue(standin, ["old"])
    run = consume(starting_position="@latest")
    wait_attached(standin, 1)  # "@latest" is the end of the partition when the link attaches
    standin.inject(HUB, "new", partition=0)
    assert [e.body_as_str() for e in run.wait(1)] == ["new"]


def test_a_position_past_the_end_is_refused(standin, consume):
    enqueue(standin, ["e0"])
    run = consume(starting_position=40)
    assert "The supplied sequence number '40' is invalid" in str(run.wait_error())
    assert run.events == []


def test_unknown_consumer_group_is_an_error(standin, consume):
    run = consume(group="nobody")
    assert "could not be found" in str(run.wait_error())


def test_a_sixth_reader_without_owner_level_is_refused(standin, consume):
    standin.inject(HUB, "x", partition=0)
    runs = []
    for _ in range(5):  # one at a time: a loaded machine may take seconds per AMQP handshake
        runs.append(consume())
        assert len(runs[-1].wait(1)) == 1, runs[-1].errors
    sixth = consume()
    assert "maximum number of allowed receivers" in str(sixth.wait_error())
    assert all(not r.errors for r in runs)


def test_an_owner_level_takes_the_partition(standin, consume):
    standin.inject(HUB, "x", partition=0)
    plain = consume()
    assert len(plain.wait(1)) == 1
    owner = consume(owner_level=1)
    assert len(owner.wait(1)) == 1
    assert plain.wait_error()  # link stolen
    lower = consume(owner_level=0)
    assert "higher epoch" in str(lower.wait_error())
    standin.inject(HUB, "y", partition=0)
    assert [e.body_as_str() for e in owner.wait(2)] == ["x", "y"]
    assert standin.stats["stolen_links"] >= 1


class ReaderCredential:
    def __init__(self, authority: TokenAuthority, subject: str) -> None:
        self.authority, self.subject = authority, subject

    def get_token(self, *scopes: str, **_: object) -> AccessToken:
        token, exp = self.authority.issue(EVENTHUBS_AUDIENCE, subject=self.subject)
        return AccessToken(token, exp)


@pytest.mark.parametrize("subject,allowed", [("reader", True), ("sender-only", False)])
def test_listen_needs_the_data_receiver_role(standin, consume, authority, subject, allowed):
    standin.inject(HUB, "x", partition=0)
    run = consume(credential=ReaderCredential(authority, subject))
    if allowed:
        assert [e.body_as_str() for e in run.wait(1)] == ["x"]
    else:
        assert "'Listen' claim(s) are required" in str(run.wait_error())
        assert run.events == []


def test_runtime_metric_tells_the_last_enqueued_event(standin, consume):
    enqueue(standin, ["e0", "e1"])
    run = consume(track_last_enqueued_event_properties=True)
    run.wait(2)
    props = run.contexts[-1].last_enqueued_event_properties
    assert props["sequence_number"] == 1
    assert props["offset"] == run.events[-1].offset
