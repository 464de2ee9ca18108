"""`se-forwarder run` keeps OpenSSL's digests out of its memory (3.4 MB on every VM, pulled in
by pydantic's import of ``secrets``; se_forwarder/lean.py) and still hashes what it must: the
digest of a document over 64 KiB, which the "unchanged" shortcut keeps instead of the body."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.process]

VM = "vm-lean"


def mapped(pid: int) -> str:
    return Path(f"/proc/{pid}/maps").read_text()


def test_the_agent_runs_on_python_digests_and_still_hashes_a_large_document(
    simulator, agent_process, tmp_path
):
    sim = simulator(vm_name=VM, rate_limit=None)
    out = tmp_path / "records.jsonl"
    agent = agent_process(sim.url, file_sink=out)
    agent.wait_log("heartbeat")
    maps = mapped(agent.proc.pid)
    assert "_hashlib" not in maps and "libcrypto" not in maps
    sim.set_events(
        [
            {
                "EventId": "LEAN-1",
                "EventType": "Freeze",
                "Resources": [VM],
                "NotBefore": time.time() + 900,
                "Description": "x" * 80_000,
            }
        ]
    )
    assert agent.wait_for(lambda a: a.records(), 15), agent.raw
    time.sleep(1)  # a few more polls of the same large document: unchanged, no new record
    assert [r["EventId"] for r in agent.records()] == ["LEAN-1"]
    assert "_hashlib" not in mapped(agent.proc.pid)
    assert agent.stop() == 0
