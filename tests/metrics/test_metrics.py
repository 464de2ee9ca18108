"""Metrics for Prometheus: off by default; a loopback HTTP endpoint and a node_exporter textfile,
parsed with prometheus-client's own parser; counters exist from the start at 0 and move as the
agent works; labels stay bounded. The agent runs in this process on the FakeClock."""

from __future__ import annotations

import socket
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from se_forwarder.config import load
from se_forwarder.errors import ConfigError

VM = "vm-metrics"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def samples(text: str) -> dict[tuple[str, tuple], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def scrape(port: int) -> dict:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        return samples(r.read().decode())


@pytest.mark.e2e
def test_metrics_exist_from_the_start_and_move_as_the_agent_works(
    simulator, agent_run, clock, tmp_path
):
    sim = simulator(vm_name=VM, rate_limit=None, clock=clock)
    port = free_port()
    textfile = tmp_path / "textfile" / "se_forwarder.prom"
    agent = agent_run(
        sim.url,
        poll_interval=0.2,
        file_sink=tmp_path / "r.jsonl",
        extra=f'\n[metrics]\nlisten = "127.0.0.1:{port}"\ntextfile = "{textfile}"\n'
        "textfile_interval = 1\n",
    )
    try:
        assert agent.messages("heartbeat")
        first = scrape(port)
        rec = (
            "se_forwarder_lifecycle_records_total",
            (("event_type", "Reboot"), ("phase", "FirstSeen")),
        )
        assert first[rec] == 0  # exists before anything happened
        assert first[("se_forwarder_poll_errors_total", ())] == 0
        assert first[("se_forwarder_delivered_records_total", (("sink", "file"),))] >= 0
        sim.set_events(
            [
                {
                    "EventId": "M-1",
                    "EventType": "Reboot",
                    "Resources": [VM],
                    "NotBefore": clock.wall_seconds() + 600,
                }
            ]
        )
        assert agent.wait_for(lambda a: a.records(), 5)
        sim.inject("500", count=3)
        clock.advance(1.5)
        later = scrape(port)
        assert later[rec] == 1 and later[("se_forwarder_poll_errors_total", ())] == 3
        assert later[("se_forwarder_polls_total", ())] > first[("se_forwarder_polls_total", ())]
        assert later[("se_forwarder_open_events_affecting_this_vm", ())] == 1
        clock.advance(1.5)
        from_file = samples(textfile.read_text())
        assert from_file[rec] == 1 and not list(textfile.parent.glob("*.tmp*"))
    finally:
        assert agent.stop() == 0
    every = samples(textfile.read_text())
    labels = {k for name, lab in every for k, _ in lab}
    assert labels <= {"sink", "phase", "event_type", "version"}  # never an EventId or a VM name


def test_metrics_are_off_by_default_and_served_on_loopback_only():
    assert not load(None, env={}).metrics.enabled
    with pytest.raises(ConfigError, match="loopback"):
        load(None, env={"SE_FORWARDER_METRICS__LISTEN": "0.0.0.0:9464"})
    assert load(None, env={"SE_FORWARDER_METRICS__LISTEN": "[::1]:9464"}).metrics.address == (
        "::1",
        9464,
    )


@pytest.mark.e2e
def test_a_taken_metrics_port_is_one_error_line_and_the_agent_goes_on(simulator, agent_run, clock):
    sim = simulator(vm_name=VM, clock=clock)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        agent = agent_run(
            sim.url, poll_interval=0.2, extra=f'\n[metrics]\nlisten = "127.0.0.1:{port}"\n'
        )
        try:
            assert agent.messages("heartbeat")
            [line] = agent.messages("cannot serve metrics; the textfile (if any) is still written")
            assert line["level"] == "error"
            assert agent.wait_for(lambda a: a.status_json()["polls"] >= 25, 10)  # polling on
            assert agent.alive
        finally:
            assert agent.stop() == 0
