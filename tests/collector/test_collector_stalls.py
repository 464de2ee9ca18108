"""A checkpoint store that freezes or stops, through the real consumer and Azurite (issue 33):
``status`` turns unhealthy within the stated time (docs/collector.md: 25 s, STALL_AFTER + one
status.json write), says why, the log says when the stall starts and ends, and the events that
came meanwhile arrive once the store answers again."""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Iterator

import pytest
from helpers.collector import CollectorWorld, scheduled
from test_collect_e2e import status, until_status, wait_rows, wait_status

from se_forwarder.collector.status import STALL_AFTER

pytestmark = [pytest.mark.e2e, pytest.mark.tls, pytest.mark.process]
STATED = STALL_AFTER + 5.0  # docs/collector.md: unhealthy within 25 s
POLL = 5.0  # margin for the `status` processes that watch it on a loaded machine


@pytest.fixture
def world(tmp_path) -> Iterator[CollectorWorld]:
    with CollectorWorld(tmp_path) as w:
        yield w


def logged(config, msg: str) -> list[dict]:
    lines = config.with_suffix(".log").read_text().splitlines()
    return [x for x in map(json.loads, lines) if x["msg"] == msg]


def wait_logged(config, msg: str, what: str, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while what not in {x.get("what") for x in logged(config, msg)}:
        assert time.monotonic() < deadline, f"no {msg!r} for {what} in the log"
        time.sleep(0.5)


def test_a_frozen_then_stopped_checkpoint_store_is_unhealthy_in_the_stated_time(world, tmp_path):
    state = tmp_path / "c"
    config = world.collector_config(state)
    proc = world.start_collector(config)
    store = world.azurite.proc
    assert store is not None
    try:
        wait_status(
            state,
            lambda s: (
                bool(s)
                and s["checkpoint_store_ok_at"] is not None
                and sum(p["owned"] for p in s["partitions"].values()) == 2
            ),
            60,
        )
        assert status(state)[0] == 0
        os.kill(store.pid, signal.SIGSTOP)  # frozen: every call to it hangs
        try:
            world.publish(scheduled("F1", "Scheduled", "2026-04-01T00:00:00Z"))
            took, _, out = until_status(state, lambda rc, _: rc == 1, STATED + 30)
            assert out["state"] == "unhealthy" and took <= STATED + POLL, (took, out)
            assert any(p.startswith("checkpoint store not answering for") for p in out["problems"])
            assert out["status"]["checkpoint_store_ok_at"] < time.time() - STALL_AFTER
            wait_logged(config, "collector stalled", "checkpoint store")
        finally:
            os.kill(store.pid, signal.SIGCONT)
        took, _, out = until_status(state, lambda rc, _: rc == 0, 60)
        assert out["state"] == "healthy", out
        wait_rows(world, 1)  # the event that came while it was frozen
        wait_logged(config, "collector moving again", "checkpoint store")
        world.azurite.stop()  # stopped: refused at once
        took, _, out = until_status(state, lambda rc, _: rc == 1, STATED + 30)
        assert took <= STATED + POLL, (took, out)
        assert any(p.startswith("checkpoint store not answering") for p in out["problems"])
        # once the client's own retries are spent, the reason is there too
        _, _, out = until_status(
            state, lambda _, o: bool(o["status"]["checkpoint_store_error"]), 90
        )
        assert out["status"]["checkpoint_store_error"].startswith("ServiceRequestError"), out
        (problem,) = [p for p in out["problems"] if p.startswith("checkpoint store")]
        assert "ServiceRequestError" in problem, problem
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
