"""Agent pieces that need no IMDS: the poll clock and the heartbeat's contents."""

from __future__ import annotations

import json

from se_forwarder import agent as agent_mod
from se_forwarder.config import Config
from se_forwarder.contract import table


def make_agent(tmp_path):
    cfg = Config.model_validate({"agent": {"state_dir": str(tmp_path / "state")},
                                 "imds": {"endpoint": "http://127.0.0.1:9"}})
    return agent_mod.Agent(cfg, [])


def test_poll_time_never_goes_backwards(tmp_path, monkeypatch, caplog):
    a = make_agent(tmp_path)
    clock = iter([1_000_000, 1_001_000, 940_000, 1_002_500])  # a step back of a minute
    monkeypatch.setattr(agent_mod, "now_ms", lambda: next(clock))
    times = [a._poll_time() for _ in range(4)]
    assert times == [1_000_000, 1_001_000, 1_001_000, 1_002_500]
    assert any("went backwards" in r.getMessage() for r in caplog.records)
    a.store.close()


def test_heartbeat_has_every_contract_column_and_sane_values(tmp_path):
    a = make_agent(tmp_path)
    hb = json.loads(a.build_heartbeat("start").to_json())
    assert list(hb) == list(table("heartbeats").column_names)
    assert hb["Reason"] == "start" and hb["UptimeSeconds"] >= 0 and hb["Polls"] == 0
    assert hb["SpoolDepth"] == 0 and hb["DroppedRecords"] == 0 and hb["OpenEventList"] == []
    a.store.close()
