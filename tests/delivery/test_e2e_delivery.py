"""What only the agent as a process shows about delivery: a kill -9 while a batch is in flight
loses nothing (the restart sends it again), and the file sink alone never imports the Azure
SDKs. ``se-forwarder run --config`` as a subprocess, the IMDS simulator and the stand-ins in this
process. The agent's delivery through every fault runs in this process: test_agent_delivery.py.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from helpers.azure import (
    AGENT,
    RECORDS,
    AzureWorld,
    expected,
    has_all,
    la_ids,
    new_ids,
    wait_until,
)

from se_forwarder_testbed.agentproc import AgentProcess

pytestmark = [pytest.mark.e2e, pytest.mark.process, pytest.mark.tls, pytest.mark.slow]


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    with AzureWorld(tmp_path_factory.mktemp("e2e"), rate_limit=None) as w:
        yield w


@pytest.fixture
def agents(w):
    started: list[AgentProcess] = []

    def start(config: Path) -> AgentProcess:
        a = AgentProcess(config, env=w.agent_env())
        started.append(a)
        return a

    yield start
    for a in started:
        if a.proc.poll() is None:
            a.stop(timeout=20)


def test_kill_9_during_a_batch_then_restart_loses_nothing(w, agents, tmp_path):
    # The answers come 3 s late, within the sink's timeout (one deadline for the whole answer):
    # late, not lost.
    cfg = w.agent_config(tmp_path / "state", sinks={"log_analytics": w.la_section(timeout=5.0)})
    events = new_ids(40)
    w.publish_events(events)
    w.la.delay_next(None, seconds=3.0)  # every request stored, then answered 3 s later
    agent = agents(cfg)
    wait_until(
        lambda: [h for h in w.la.history() if h.stream == RECORDS],
        20,
        what="a records request in flight",
    )
    agent.kill9()
    in_flight = [h for h in w.la.history() if h.stream == RECORDS]
    before = la_ids(w)
    assert len(in_flight) == 1 and len(before) == in_flight[0].records  # stored, unconfirmed
    w.la.clear_faults()

    agents(cfg)  # restart on the same state directory
    want = expected(w, events)
    wait_until(lambda: has_all(la_ids(w), want), 30, what="every record after the restart")
    w.sim.set_events([])
    want |= expected(w, events, ("Removed",))
    wait_until(lambda: has_all(la_ids(w), want), 30, what="Removed records")
    got = la_ids(w)
    assert set(got) == want
    dups = {k for k, n in Counter(got).items() if n > 1}
    assert dups and dups <= set(before)  # duplicates only of the batch in flight at the kill


# -- no Azure SDK without an Azure sink ---------------------------------------------------------


def _imports_of_agent(w: AzureWorld, tmp_path: Path, sinks: dict) -> set[str]:
    """Run the agent under ``python -X importtime`` for a few polls; the modules it imported."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    cfg = w.agent_config(tmp_path / "state", sinks=sinks)
    proc = subprocess.Popen(
        [sys.executable, "-X", "importtime", AGENT, "run", "--config", str(cfg)],
        env=w.agent_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_until((tmp_path / "state" / "status.json").exists, 20, what="the agent running")
        time.sleep(0.5)  # a few polls and deliveries
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err[-2000:]
    return {
        line.rsplit("|", 1)[1].strip()
        for line in err.splitlines()
        if line.startswith("import time:") and "|" in line
    }


def test_the_file_sink_alone_never_imports_the_azure_sdks(w, tmp_path):
    mods = _imports_of_agent(
        w, tmp_path / "file", {"file": {"path": str(tmp_path / "records.jsonl")}}
    )
    assert "se_forwarder.agent" in mods and "se_forwarder.sinks.file.sink" in mods
    assert not [m for m in mods if m == "azure" or m.startswith("azure.")]
    assert "se_forwarder.identity.credential" not in mods
    # the same probe sees them when an Azure sink is configured (the check can fail)
    mods = _imports_of_agent(w, tmp_path / "la", {"log_analytics": w.la_section()})
    assert "azure.monitor.ingestion" in mods and "se_forwarder.sinks.log_analytics.sink" in mods
    assert "se_forwarder.identity.credential" in mods
