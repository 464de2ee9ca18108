"""The agent acting on events across a kill -9: ``se-forwarder run`` as a process against the
IMDS simulator (which honours approvals: an approved event starts early), with real hook
scripts. Killed between the hook and the approval, the approval goes out after the restart and
the hook does not run again; killed during a hook, the hook is never run again nor approved.
Everything else about hooks and approvals runs in this process: test_actions.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers.actions import SPEED, hook, policy, runs, scenario

pytestmark = [pytest.mark.e2e, pytest.mark.process, pytest.mark.slow]

APPROVE_AFTER = {"pre_hooks": ["prep"], "approve": "after-hooks"}


def started(agent) -> dict | None:
    return next((r for r in agent.records() if r["Phase"] == "Started"), None)


def posts(sim) -> list:
    return [r for r in sim.requests if r.method == "POST"]


def status(tmp_path: Path, name: str = "agent") -> dict:
    return json.loads((tmp_path / f"{name}-state" / "status.json").read_text())


def start(simulator, agent_process, tmp_path, extra: str, *, sc=None, name="agent", **kw):
    sim = simulator(sc or scenario(), speed=SPEED, first_call_delay=0.0)
    hb = tmp_path / f"{name}-heartbeats.jsonl"
    agent = agent_process(
        sim.url,
        name=name,
        file_sink=tmp_path / f"{name}-records.jsonl",
        extra=f'heartbeat_path = "{hb}"\n' + extra,
        **kw,
    )
    return sim, agent


def test_kill_9_between_hook_and_approval_resumes_with_the_approval_only(
    simulator, agent_process, tmp_path
):
    prep = hook(tmp_path, "prep", "exit 0\n")
    extra = policy({"prep": {"command": [str(prep)]}}, [APPROVE_AFTER])
    # NotBefore 15 s away: two agent start-ups on a loaded machine fit well before it, so the
    # event can only start early through the approval sent after the restart
    sim, agent = start(simulator, agent_process, tmp_path, extra, sc=scenario(not_before=150.0))
    sim.inject_approval(503, 1000)  # IMDS refuses approvals for now: the agent keeps retrying
    assert agent.wait_for(lambda a: a.messages("approval not accepted yet; will retry"), 30)
    assert len(agent.messages("hook succeeded")) == 1
    agent.kill9()
    sim.reset_approval_faults()
    again = agent_process(
        sim.url, name="agent", file_sink=tmp_path / "agent-records.jsonl", extra=extra
    )
    assert again.wait_for(lambda a: started(a) is not None, 30), "".join(again.raw[-40:])
    assert runs(tmp_path, "prep") == [f"pre {sim.event_id(0)} "]  # never twice
    assert again.messages("hook started") == []
    assert [r["Phase"] for r in again.records()] == ["Approved", "Started"]
    assert started(again)["StartDelaySeconds"] < -1.0


def test_kill_9_during_a_hook_never_runs_it_again_nor_approves(simulator, agent_process, tmp_path):
    prep = hook(tmp_path, "prep", "sleep 60\n")
    extra = policy({"prep": {"command": [str(prep)], "timeout": 120}}, [APPROVE_AFTER])
    # Started stays in the document for 60 real seconds: on a busy machine the restart may come
    # after NotBefore, and the restarted agent must still see the event it did not approve
    sc = scenario(remove_after_start=600.0)
    sim, agent = start(simulator, agent_process, tmp_path, extra, sc=sc)
    assert agent.wait_for(lambda a: a.messages("hook started"), 30)
    agent.kill9()
    again = agent_process(sim.url, name="agent", extra=extra)
    assert again.wait_for(lambda a: started(a) is not None, 30), "".join(again.raw[-40:])
    assert len(runs(tmp_path, "prep")) == 1 and again.messages("hook started") == []
    assert (
        len(
            again.messages(
                "hook was interrupted by a restart of the agent; not run again (at most once)"
            )
        )
        == 1
    )
    assert posts(sim) == [] and started(again)["StartDelaySeconds"] >= 0
    again.stop()
    assert status(tmp_path)["hooks_failed"] == 1
