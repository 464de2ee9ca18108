"""An approval whose answer a kill -9 cut off: IMDS took it, the event started early, and the agent
was killed before it committed the ``Approved`` record. Back, it must still record the decision
once (``Approved``, and ``ApprovedBy`` ``ThisVm`` on ``Started``), not "approved elsewhere"
(actions/intents.py). Found by the service's chaos scenario (se_forwarder_testbed.spread)."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest
from helpers.actions import scenario

from se_forwarder_testbed.agentproc import AgentProcess, write_config
from se_forwarder_testbed.simulator.server import Simulator

pytestmark = [pytest.mark.e2e, pytest.mark.process, pytest.mark.slow]


class KillsAtApproval(Simulator):
    """Takes the first approval, then kill -9s the agent before the answer leaves."""

    pid: int | None = None

    def _approve_locked(self, ids: list[str]) -> bool:
        ok = super()._approve_locked(ids)
        if ok and self.pid is not None:
            os.kill(self.pid, signal.SIGKILL)
            self.pid = None
        return ok


def _records(path: Path) -> dict[str, list[dict]]:
    by: dict[str, dict[str, dict]] = {}
    for line in path.read_text().splitlines() if path.exists() else []:
        r = json.loads(line)
        if r.get("Phase"):
            by.setdefault(r["Phase"], {})[r["RecordId"]] = r
    return {phase: list(rows.values()) for phase, rows in by.items()}


@pytest.mark.timeout(90)
def test_an_approval_cut_off_by_kill_9_is_recorded_once_after_the_restart(tmp_path):
    sc = scenario("vm-k", appear=1.0, not_before=60.0, approval_delay=0.0, remove_after_start=6.0)
    sim = KillsAtApproval(sc, speed=1.0, first_call_delay=0.0).start()
    sink = tmp_path / "records.jsonl"
    config = write_config(
        tmp_path / "agent.toml",
        sim.url,
        tmp_path / "state",
        file_sink=sink,
        extra='\n[[policy.rules]]\nname = "at once"\napprove = "at-once"\n',
    )
    agent = AgentProcess(config)
    try:
        sim.pid = agent.proc.pid
        agent.proc.wait(20)  # killed inside its approval POST
        assert sim.approvals and agent.proc.returncode == -signal.SIGKILL
        time.sleep(1.0)  # systemd's RestartSec: the event has started meanwhile
        agent = AgentProcess(config)
        assert sim.wait_until(lambda s: not s.events(), 20)  # over
        assert agent.wait_for(lambda a: a.logged("record", Phase="Removed"), 20)
    finally:
        agent.stop()
        sim.stop()
    got = _records(sink)
    [approved] = got.get("Approved", [None])  # the decision, recorded once, saying who
    assert approved and approved["Acted"] == 'rule 1 "at once": approved by this VM', got
    [started] = got["Started"]
    assert started["ApprovedBy"] == "ThisVm", started
