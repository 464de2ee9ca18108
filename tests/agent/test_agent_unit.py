"""Agent pieces that need no IMDS: the heartbeat's contents. (A stepped wall clock:
test_clock_step.py.)"""

from __future__ import annotations

import json

from se_forwarder import agent as agent_mod
from se_forwarder.config import Config
from se_forwarder.contract import table
from se_forwarder_testbed.fakeclock import FakeClock


def make_agent(tmp_path, clock=None):
    cfg = Config.model_validate(
        {
            "agent": {"state_dir": str(tmp_path / "state")},
            "imds": {"endpoint": "http://127.0.0.1:9"},
        }
    )
    return agent_mod.Agent(cfg, [], clock=clock or FakeClock())


def test_heartbeat_has_every_contract_column_and_sane_values(tmp_path):
    a = make_agent(tmp_path)
    hb = json.loads(a.build_heartbeat("start").to_json())
    assert list(hb) == list(table("heartbeats").column_names)
    assert hb["Reason"] == "start" and hb["UptimeSeconds"] >= 0 and hb["Polls"] == 0
    assert hb["SpoolDepth"] == 0 and hb["DroppedRecords"] == 0 and hb["OpenEventList"] == []
    a.store.close()
