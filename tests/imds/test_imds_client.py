"""The IMDS client against the simulator over loopback: headers, no proxy, the 5 req/s budget,
one attempt per call (the agent retries at its next tick), the slow first call, keep-alive,
approvals."""

from __future__ import annotations

import json
import threading
import time

import pytest
from helpers.hostile_http import HostilePeer

from se_forwarder.imds.client import ImdsClient, RateLimiter
from se_forwarder.imds.wire import MAX_ANSWER_BYTES
from se_forwarder_testbed.fakeclock import FakeClock
from se_forwarder_testbed.simulator.server import Simulator


@pytest.fixture
def sim():
    s = Simulator(rate_limit=5).start()
    yield s
    s.stop()


def logged(sim: Simulator, n: int) -> list:
    """The request log once it holds ``n`` entries (the simulator logs just after answering)."""
    assert sim.wait_until(lambda s: len(s.requests) >= n, 2.0)
    return sim.requests


def max_in_any_second(times: list[float]) -> int:
    times = sorted(times)
    best = 0
    j = 0
    for i, t in enumerate(times):
        while times[j] <= t - 1.0:
            j += 1
        best = max(best, i - j + 1)
    return best


def test_scheduled_events_sends_metadata_header_and_no_forwarded_for(sim):
    client = ImdsClient(sim.url)
    answer = client.scheduled_events()
    assert answer.ok, answer.describe()
    doc = json.loads(answer.body)
    assert doc["Events"] == [] and isinstance(doc["DocumentIncarnation"], int)
    req = logged(sim, 1)[-1]
    assert req.headers.get("Metadata") == "true"
    assert "X-Forwarded-For" not in req.headers
    assert req.path.endswith("api-version=2020-07-01")


def test_proxy_variables_are_ignored(sim, monkeypatch):
    for var in ("HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.setenv(var, "http://127.0.0.1:9")  # nothing listens there
    monkeypatch.setenv("NO_PROXY", "")
    answer = ImdsClient(sim.url).scheduled_events()
    assert answer.ok, answer.describe()


def test_one_keep_alive_connection_for_many_polls(sim):
    client = ImdsClient(sim.url)
    for _ in range(4):
        assert client.scheduled_events().ok
    ports = {r.client_port for r in logged(sim, 4)}
    assert len(ports) == 1


def test_never_more_than_five_requests_per_second(sim):
    client = ImdsClient(sim.url)
    t0 = time.monotonic()
    for _ in range(12):
        assert client.scheduled_events().ok
    assert time.monotonic() - t0 >= 2.0  # 12 requests at 5/s take over two seconds
    reqs = logged(sim, 12)
    assert max_in_any_second([r.at for r in reqs]) <= 5
    assert all(r.status == 200 for r in reqs)  # the simulator never had to say 429


@pytest.mark.parametrize("kind,status", [("410", 410), ("429", 429), ("500", 500), ("503", 503)])
def test_a_transient_answer_is_one_attempt_reported_at_once(sim, kind, status):
    """No retry loop inside a call: the failure reaches the agent at once (it counts it, logs
    it and polls again at its next tick), and the next call gets the next answer."""
    sim.inject(kind, count=1)
    client = ImdsClient(sim.url)
    t0 = time.monotonic()
    answer = client.scheduled_events()
    assert answer.status == status and not answer.ok and time.monotonic() - t0 < 1.0
    assert answer.describe().startswith(f"HTTP {status}")
    assert client.scheduled_events().ok
    assert [r.status for r in logged(sim, 2)] == [status, 200]


def test_a_dropped_connection_is_an_error_and_the_next_call_reconnects(sim):
    sim.inject("drop", count=1)
    client = ImdsClient(sim.url)
    answer = client.scheduled_events()
    assert answer.status is None and answer.error
    assert client.scheduled_events().ok


def test_slow_first_call_uses_the_long_timeout_then_the_short_one():
    with Simulator(first_call_delay=1.5) as sim:
        client = ImdsClient(sim.url, timeout=0.3, first_call_timeout=5)
        # The instance document is not the enabling call: it gets the short timeout and answers.
        assert client.instance()["compute"]["name"]
        t0 = time.monotonic()
        first = client.scheduled_events()
        assert first.ok and time.monotonic() - t0 >= 1.4
        # Once enabled, a slow answer (1 s) overruns the short timeout: an error, at once.
        sim.inject("slow", delay=1.0)
        later = client.scheduled_events()
        assert later.error is not None and later.error.startswith("timeout")
        assert client.scheduled_events().ok


def test_the_long_first_timeout_ends_with_any_answer_even_an_error():
    """The enabling call's 120 s applies until the endpoint has answered once, with anything:
    a 500 counts; a refused or hung attempt does not."""
    with Simulator() as sim:
        client = ImdsClient(sim.url, timeout=0.3, first_call_timeout=5)
        sim.inject("slow", delay=1.0)
        t0 = time.monotonic()
        assert client.scheduled_events().ok  # 1 s fits the long timeout of the first call
        assert time.monotonic() - t0 >= 0.9
        sim.inject("slow", delay=1.0)
        assert client.scheduled_events().error.startswith("timeout after 0.3")
    with Simulator() as sim:
        client = ImdsClient(sim.url, timeout=0.3, first_call_timeout=5)
        sim.inject("500", count=1)
        assert client.scheduled_events().status == 500  # answered: enabled
        sim.inject("slow", delay=1.0)
        assert client.scheduled_events().error.startswith("timeout after 0.3")


def test_a_hung_answer_is_a_timeout_error():
    with Simulator(hang_seconds=2.0) as sim:
        client = ImdsClient(sim.url, timeout=0.3, first_call_timeout=0.3)
        sim.inject("hang", count=5)
        answer = client.scheduled_events()
        assert answer.error is not None and answer.error.startswith("timeout")


def test_unreachable_endpoint_is_an_error_not_an_exception():
    answer = ImdsClient("http://127.0.0.1:9").scheduled_events()
    assert answer.status is None and answer.error == "connection refused"


def test_instance_document_and_approval(sim):
    client = ImdsClient(sim.url)
    doc = client.instance()
    assert doc["compute"]["name"] == sim.scenario.vm.name
    sim.set_events(
        [
            {
                "EventId": "11111111-2222-3333-4444-555555555555",
                "EventType": "Reboot",
                "Resources": [sim.scenario.vm.name],
                "NotBefore": time.time() + 600,
            }
        ]
    )
    ok = client.approve(["11111111-2222-3333-4444-555555555555"])
    assert ok.status == 200
    assert "11111111-2222-3333-4444-555555555555" in sim.approvals
    assert client.approve(["not-an-event"]).status != 200


def test_rate_limiter_window():
    clock = FakeClock()
    rl = RateLimiter(5, clock)
    for _ in range(5):
        assert rl.delay() == 0.0
        rl.record()
    assert rl.delay() == pytest.approx(1.0 + rl.margin)
    clock.advance(0.4)
    assert rl.delay() == pytest.approx(0.6 + rl.margin)
    clock.step_wall(-3600)  # a wall clock stepped back an hour: the budget is monotonic
    assert rl.delay() == pytest.approx(0.6 + rl.margin)
    clock.advance(0.6 + rl.margin)
    assert rl.delay() == pytest.approx(0.0, abs=1e-9)


def test_the_window_counts_from_the_answer_a_late_arrival_cannot_crowd_it():
    """Five requests sent at 0 whose answers came back at 0.5 (a busy VM: they may have reached
    IMDS as late as 0.5): a sixth at 1.1 would be the sixth arrival inside 0.5..1.5, so it waits."""
    clock = FakeClock()
    rl = RateLimiter(5, clock)
    slots = [rl.reserve() for _ in range(5)]
    assert all(wait == 0.0 for wait, _ in slots)
    clock.advance(0.5)
    for _, slot in slots:
        rl.settle(slot)
    clock.advance(0.6)
    wait, _ = rl.reserve()
    assert wait == pytest.approx(0.4 + rl.margin)
    clock.advance(wait + 1e-9)
    assert rl.reserve()[0] == 0.0


def test_abort_cuts_a_slow_first_call_short():
    """SIGTERM during the enabling call (up to 120 s) must not wait for it: the agent aborts."""
    with Simulator(first_call_delay=30) as sim:
        stop = threading.Event()
        client = ImdsClient(sim.url, first_call_timeout=60, stop=stop)

        def stop_soon():
            stop.set()
            client.abort()

        threading.Timer(0.5, stop_soon).start()
        t0 = time.monotonic()
        answer = client.scheduled_events()
        assert time.monotonic() - t0 < 5
        assert answer.error is not None


# -- a hostile endpoint: every answer bounded in size and time (issue 18) ------------------------


def within(seconds: float, call):
    """``call()``'s result, or a failure if it has not returned after ``seconds`` (an unbounded
    read would otherwise hang the test)."""
    out: list = []
    t = threading.Thread(target=lambda: out.append(call()), daemon=True)
    t.start()
    t.join(seconds)
    assert out, f"no answer after {seconds} s: the read is not bounded"
    return out[0]


@pytest.mark.parametrize("mode", ["trickle-headers", "trickle-body"])
def test_an_answer_trickled_a_byte_at_a_time_ends_at_one_deadline(mode):
    """Each byte comes well within the timeout (0.5 s apart, timeout 1.5 s): only a deadline for
    the whole answer ends it."""
    with HostilePeer(mode) as peer:
        client = ImdsClient(f"http://127.0.0.1:{peer.port}", timeout=1.5, first_call_timeout=1.5)
        t0 = time.monotonic()
        answer = within(20, client.scheduled_events)
        assert answer.error == "timeout after 1.5 s" and answer.status is None
        assert time.monotonic() - t0 < 3.0


def test_an_answer_that_never_ends_is_read_only_up_to_the_bound():
    with HostilePeer("huge") as peer:
        client = ImdsClient(f"http://127.0.0.1:{peer.port}", timeout=5, first_call_timeout=5)
        answer = within(20, client.scheduled_events)
        assert answer.status is None and answer.body == b""
        assert answer.error == f"answer too large: over {MAX_ANSWER_BYTES} bytes"
        assert peer.closed.wait(5)  # it hung up
        # what it had sent when it noticed: the bound plus what loopback's socket buffers held
        assert peer.sent["huge"] < MAX_ANSWER_BYTES + 16 * 1024 * 1024
