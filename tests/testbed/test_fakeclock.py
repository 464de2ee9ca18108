"""The test bed's FakeClock: time moves only when the test moves it, each waiter wakes at its own
deadline, and a step returns only once the threads it woke are waiting again (deterministic, no
spinning, no sleeping)."""

from __future__ import annotations

import threading
import time

import pytest

from se_forwarder.clock import SYSTEM
from se_forwarder_testbed.fakeclock import START_MS, FakeClock


def ticker(
    clock: FakeClock, every: float, log: list, name: str, stop: threading.Event, work: float = 0.0
) -> threading.Thread:
    """A thread that logs (name, monotonic) every ``every`` fake seconds, working ``work`` real
    seconds each time."""

    def run() -> None:
        while not clock.wait(stop, every):
            if work:
                time.sleep(work)
            log.append((name, clock.monotonic()))

    t = threading.Thread(target=run, daemon=True)
    clock.track(t)
    t.start()
    return t


def test_wall_and_monotonic_move_together_and_a_wall_step_moves_only_the_wall():
    clock = FakeClock()
    m0 = clock.monotonic()
    assert clock.wall_ms() == START_MS
    clock.advance(2.5)
    assert clock.wall_ms() == START_MS + 2500 and clock.monotonic() == pytest.approx(m0 + 2.5)
    clock.step_wall(-3600)
    assert clock.wall_ms() == START_MS + 2500 - 3_600_000
    assert clock.monotonic() == pytest.approx(m0 + 2.5)
    assert clock.wall_seconds() == pytest.approx((START_MS + 2500 - 3_600_000) / 1000)


def test_each_waiter_wakes_at_its_own_deadline_in_order_and_the_step_waits_for_its_work():
    clock = FakeClock()
    stop = clock.event()
    log: list = []
    t0 = clock.monotonic()
    threads = [
        ticker(clock, 1.0, log, "fast", stop, work=0.02),
        ticker(clock, 2.3, log, "slow", stop),
    ]
    clock.advance(5.0)
    # The work a step woke is done when advance returns: nothing is missing, nothing extra.
    assert [(n, round(t - t0, 3)) for n, t in log] == [
        ("fast", 1.0),
        ("fast", 2.0),
        ("slow", 2.3),
        ("fast", 3.0),
        ("fast", 4.0),
        ("slow", 4.6),
        ("fast", 5.0),
    ]
    stop.set()
    for t in threads:
        t.join(5)
        assert not t.is_alive()


def test_time_does_not_move_by_itself_and_an_event_wakes_its_waiter_at_once():
    clock = FakeClock()
    wake = clock.event()
    woke: list[float] = []

    def waiter() -> None:
        woke.append(clock.wait(wake, 30.0))
        woke.append(clock.monotonic())

    t = threading.Thread(target=waiter, daemon=True)
    clock.track(t)
    t.start()
    before = clock.monotonic()
    time.sleep(0.05)  # real time passes; fake time does not
    assert woke == [] and clock.monotonic() == before
    wake.set()
    t.join(5)
    assert woke == [True, before]


def test_run_until_stops_at_the_step_that_made_the_predicate_true():
    clock = FakeClock()
    stop = clock.event()
    log: list = []
    ticker(clock, 0.2, log, "poll", stop)
    t0 = clock.monotonic()
    assert clock.run_until(lambda: len(log) >= 7, within=60)
    assert len(log) == 7 and clock.monotonic() - t0 == pytest.approx(1.4)
    assert not clock.run_until(lambda: len(log) >= 1000, within=2)  # gives up after 2 fake s
    assert clock.monotonic() - t0 == pytest.approx(3.4) and len(log) == 17
    stop.set()


def test_a_thread_that_never_comes_back_is_named_not_waited_for_forever():
    clock = FakeClock(settle_limit=0.3)
    release = threading.Event()
    t = threading.Thread(target=release.wait, name="stuck-worker", daemon=True)
    clock.track(t)
    t.start()
    with pytest.raises(RuntimeError, match="stuck-worker"):
        clock.advance(1)
    release.set()


def test_the_fake_clock_refuses_an_event_it_cannot_see_set():
    with pytest.raises(TypeError):
        FakeClock().wait(threading.Event(), 1.0)
    with pytest.raises(TypeError):
        FakeClock().wait(FakeClock().event(), 1.0)


def test_the_system_clock_is_the_real_one():
    assert abs(SYSTEM.wall_ms() - time.time() * 1000) < 1000
    ev = SYSTEM.event()
    t0 = time.monotonic()
    assert SYSTEM.wait(ev, 0.05) is False and time.monotonic() - t0 >= 0.04
    ev.set()
    assert SYSTEM.wait(ev, 10) is True
