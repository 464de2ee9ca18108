"""A hook interrupted by the agent's death is reported and counted once, not at every restart
(issue 18: 204 error lines for 20 interrupted hooks over 25 restarts). The journal entry a dead
agent left (claimed, no result) is what a kill -9 during a hook leaves
(tests/actions/test_actions_e2e.py does that with a process); the restarts here run in this
process on the FakeClock."""

from __future__ import annotations

from helpers.actions import hook, policy, runs, scenario

from se_forwarder.hooks import Journal
from se_forwarder.hooks.states import HookState
from se_forwarder.outbox import Store

INTERRUPTED = "hook was interrupted by a restart of the agent; not run again (at most once)"
NOT_APPROVED = "not approved: a hook before it did not succeed"


def test_an_interrupted_hook_is_reported_and_counted_once_over_restarts(
    simulator, agent_run, clock, tmp_path
):
    prep = hook(tmp_path, "prep", "exit 0\n")
    extra = policy(
        {"prep": {"command": [str(prep)]}}, [{"pre_hooks": ["prep"], "approve": "after-hooks"}]
    )
    sim = simulator(scenario(not_before=600.0), speed=1.0, first_call_delay=0.0, clock=clock)
    state = tmp_path / "state"
    first = agent_run(sim.url, name="first", state_dir=state)  # observes: the event is open
    assert first.wait_for(lambda a: a.messages("record"), 30)
    assert first.stop() == 0
    eid = sim.event_id(0)
    store = Store(state)  # what a kill -9 during the hook leaves: claimed, no result
    assert Journal(store).claim(eid, "pre", "prep", clock.wall_ms())
    store.close()
    said = []
    for n in range(4):  # the start that finds it, then three more while the event is open
        clock.advance(2)  # the simulator's request budget, spent by the run before
        agent = agent_run(sim.url, name=f"run{n}", state_dir=state, extra=extra)
        # the open event is taken up (with the VM's identity) and its lane has run
        assert agent.wait_for(lambda a: a.logged("policy decision", EventId=eid, resumed=True), 30)
        clock.advance(5)
        said.append((len(agent.messages(INTERRUPTED)), len(agent.messages(NOT_APPROVED))))
        assert agent.stop() == 0
        assert agent.status_json()["hooks_failed"] == said[-1][0]
    assert said == [(1, 1), (0, 0), (0, 0), (0, 0)]
    store = Store(state)
    assert Journal(store).get(eid, "pre", "prep").state == HookState.INTERRUPTED
    store.close()
    assert runs(tmp_path, "prep") == []  # never run (at most once)
    assert sim.approvals == {}  # nor approved after it
