"""The Event Hubs sink against a hostile AMQP peer (the Event Hubs stand-in's ``hostile_next``),
through the unmodified SDK: a frame announcing 2 GiB closes the connection before the SDK
allocates it, and a peer that never answers ends the send at its deadline
(``sinks/event_hubs/peer_bound.py``). Each send runs in a thread joined with a limit, so a sink
without the bounds fails these tests instead of hanging."""

from __future__ import annotations

import resource
import threading
import time

import pytest
from helpers.azure import AzureWorld, items, record

from se_forwarder.errors import Verdict
from se_forwarder.sinks.base import DeliveryError

pytestmark = [pytest.mark.e2e, pytest.mark.tls]


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    with AzureWorld(tmp_path_factory.mktemp("eh-hostile")) as w:
        yield w


@pytest.fixture
def sinks(world):
    """``make(timeout)``: a sink, closed after the test in a thread joined with a limit (a sink
    without the bounds hangs in close too)."""
    made = []

    def make(timeout: float):
        made.append(world.eh_sink(timeout=timeout))
        return made[-1]

    yield make
    for s in made:
        closing = threading.Thread(target=s.close, daemon=True)
        closing.start()
        closing.join(10)


@pytest.fixture
def eh(world):
    world.eh.clear()
    world.eh.clear_faults()
    yield world.eh
    world.eh.clear_faults()


def failed_within(sink, limit: float) -> tuple[DeliveryError, float]:
    """The send's failure (nothing delivered: the sink returns it) and how long it took."""
    out: list = []

    def send() -> None:
        result = sink.send(items([record(1)]))
        out.append(result.failure if result.delivered == 0 and result.failure else result)

    t0 = time.monotonic()
    thread = threading.Thread(target=send, daemon=True)
    thread.start()
    thread.join(limit)
    assert out, f"the send was still waiting after {limit} s"
    assert isinstance(out[0], DeliveryError), out[0]
    return out[0], time.monotonic() - t0


def test_a_peer_that_never_answers_ends_the_send_at_its_deadline(sinks, eh):
    eh.hostile_next("silent", 5)
    sink = sinks(2.0)
    err, seconds = failed_within(sink, limit=15)
    assert err.verdict is Verdict.RETRY
    assert "no answer within 3 s: connection closed" in str(err)
    assert 2.5 < seconds < 5.0
    eh.clear_faults()  # the peer behaves again: the next send goes through
    assert sink.send(items([record(2)], start=2)).delivered == 1


def test_a_frame_over_the_bound_closes_the_connection_before_it_is_read(sinks, eh):
    eh.hostile_next("huge-frame", 5)
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    err, seconds = failed_within(sinks(5.0), limit=20)
    assert err.verdict is Verdict.RETRY
    assert "AMQP frame of 2147483632 bytes (at most 1048576)" in str(err)
    assert seconds < 5.0
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss0 < 64 * 1024  # KiB
