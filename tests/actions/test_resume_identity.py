"""Events open when the agent starts are taken up by the policy with the VM's identity, not
without it (issue 18: no record, and no decision, may take a wrong AffectsThisVm). With the
instance document failing at a restart, the open event's view said AffectsThisVm null, so its
pre-hook and approval were never done, not even once the document answered. In this process, on
the FakeClock."""

from __future__ import annotations

from helpers.actions import hook, policy, runs, scenario

VM = "vmss_7"  # a scale-set VM: its name is not the host name


def test_an_event_open_at_start_is_acted_on_once_the_instance_document_answers(
    simulator, agent_run, clock, tmp_path
):
    prep = hook(tmp_path, "prep", "exit 0\n")
    extra = policy(
        {"prep": {"command": [str(prep)]}}, [{"pre_hooks": ["prep"], "approve": "after-hooks"}]
    )
    sim = simulator(
        scenario(VM, not_before=900.0),
        speed=1.0,
        first_call_delay=0.0,
        clock=clock,
        rate_limit=None,
    )
    state = tmp_path / "state"
    observer = agent_run(sim.url, name="observer", state_dir=state)  # before the policy came
    assert observer.wait_for(lambda a: a.messages("record"), 30)
    assert observer.stop() == 0
    eid = sim.event_id(0)
    sim.instance_status = 503  # the restart finds the instance document failing
    agent = agent_run(sim.url, name="acting", state_dir=state, extra=extra)
    clock.advance(10)
    assert runs(tmp_path, "prep") == [] and sim.approvals == {}  # nothing decided on no identity
    sim.instance_status = None
    assert agent.wait_for(lambda a: eid in sim.approvals, 90)
    assert runs(tmp_path, "prep") == [f"pre {eid} "]
    [decided] = agent.logged("policy decision", EventId=eid)
    assert decided["resumed"] is True
    assert agent.stop() == 0
