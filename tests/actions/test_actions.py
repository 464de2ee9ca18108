"""The agent acting on events: the agent in this process on the FakeClock against the IMDS
simulator on the same clock (which honours approvals: an approved event starts early), with
real hook scripts (a hook is a process: fake time stands still while it runs, and its timeout
is real time).

Hook success, then approval, then Started early; hook failure or timeout, no approval, Started
at NotBefore; multi-VM events under ``never`` and ``leader``; approvals answered 400, 429 and
500; post hooks with the outcome; dry run; a re-run on Updated; status and the heartbeat
counters; hostile bytes in an event; notifications that tell what happened (a failed drain, an
approval given up). kill -9 between a hook and its approval, and during a hook:
test_actions_e2e.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers.actions import hook, policy, runs, scenario

pytestmark = pytest.mark.e2e  # the simulator over loopback and hook processes; no agent process

APPROVE_AFTER = {"pre_hooks": ["prep"], "approve": "after-hooks"}


def phases(agent) -> list[str]:
    return [r["Phase"] for r in agent.records()]


def started(agent) -> dict | None:
    return next((r for r in agent.records() if r["Phase"] == "Started"), None)


def posts(sim) -> list:
    return [r for r in sim.requests if r.method == "POST"]


def start(simulator, agent_run, clock, tmp_path: Path, extra: str, *, sc=None, name="agent"):
    sim = simulator(sc or scenario(), speed=1.0, first_call_delay=0.0, clock=clock)
    hb = tmp_path / f"{name}-heartbeats.jsonl"
    agent = agent_run(
        sim.url,
        name=name,
        file_sink=tmp_path / f"{name}-records.jsonl",
        extra=f'heartbeat_path = "{hb}"\n' + extra,
    )
    return sim, agent


def test_hook_succeeds_then_approval_then_started_early(simulator, agent_run, clock, tmp_path):
    prep = hook(tmp_path, "prep", 'echo "ready for $SE_EVENT_TYPE"\n')
    sim, agent = start(
        simulator,
        agent_run,
        clock,
        tmp_path,
        policy({"prep": {"command": [str(prep)]}}, [APPROVE_AFTER]),
    )
    assert agent.wait_for(lambda a: "Removed" in phases(a), 120)
    assert phases(agent) == ["FirstSeen", "Approved", "Started", "Removed"]
    eid = sim.event_id(0)
    assert runs(tmp_path, "prep") == [f"pre {eid} "]
    assert [m["line"] for m in agent.messages("hook output")] == ["ready for Reboot"]
    assert list(sim.approvals) == [eid] and len(posts(sim)) == 1
    # Seen at 2 s, NotBefore at 40 s: approved after the hook (the POST takes its turn in the
    # request budget with the polls), started 2 s later: about 36 s early.
    assert -36.5 <= started(agent)["StartDelaySeconds"] <= -33.0
    assert agent.stop() == 0
    st = agent.status_json()
    assert (st["hooks_succeeded"], st["hooks_failed"], st["approvals_sent"]) == (1, 0, 1)
    hb = [json.loads(x) for x in (tmp_path / "agent-heartbeats.jsonl").read_text().splitlines()]
    assert (hb[-1]["Reason"], hb[-1]["HooksSucceeded"], hb[-1]["ApprovalsSent"]) == ("stop", 1, 1)
    text = agent.status_text()
    assert "hooks:        running 0, done 1, failed 0" in text
    assert "approvals:    sent 1, failed 0" in text


@pytest.mark.parametrize(
    "body,timeout,state",
    [
        ("echo not ready\nexit 4\n", 30, "failed"),
        pytest.param("sleep 60\n", 1, "timeout", marks=pytest.mark.slow),
    ],
)  # a real 1 s timeout
def test_hook_fails_or_hangs_no_approval_and_the_event_starts_at_not_before(
    simulator, agent_run, clock, tmp_path, body, timeout, state
):
    prep = hook(tmp_path, "prep", body)
    sim, agent = start(
        simulator,
        agent_run,
        clock,
        tmp_path,
        policy({"prep": {"command": [str(prep)], "timeout": timeout}}, [APPROVE_AFTER]),
    )
    assert agent.wait_for(lambda a: started(a) is not None, 120)
    assert "Approved" not in phases(agent) and posts(sim) == [] and sim.approvals == {}
    assert started(agent)["StartDelaySeconds"] >= 0  # at NotBefore, not before
    msg = {
        "failed": "hook failed",
        "timeout": "hook timed out after 1 s; its process group was killed",
    }
    assert len(agent.messages(msg[state])) == 1
    assert len(agent.messages("not approved: a hook before it did not succeed")) == 1
    assert len(sim.requests) > 150  # polling went on at its cadence: 5 a second for 40 s
    assert agent.stop() == 0
    assert agent.status_json()["hooks_failed"] == 1


@pytest.mark.parametrize(
    "vm,multi_vm,approves",
    [
        ("vm-a", "never", False),  # names another VM: not approved without a leader rule
        ("vm-a", "leader", True),  # vm-a sorts first in Resources: it approves
        ("vm-b", "leader", False),  # vm-b is not the leader: it runs its hooks, never approves
    ],
)
def test_multi_vm_events(simulator, agent_run, clock, tmp_path, vm, multi_vm, approves):
    prep = hook(tmp_path, "prep", "exit 0\n")
    sc = scenario(vm, resources=("vm-b", "vm-a"), not_before=30.0)
    sim, agent = start(
        simulator,
        agent_run,
        clock,
        tmp_path,
        policy({"prep": {"command": [str(prep)]}}, [{**APPROVE_AFTER, "multi_vm": multi_vm}]),
        sc=sc,
    )
    assert agent.wait_for(lambda a: started(a) is not None, 120)
    assert len(runs(tmp_path, "prep")) == 1  # hooks run on every affected VM
    assert bool(sim.approvals) == approves and ("Approved" in phases(agent)) == approves
    assert (started(agent)["StartDelaySeconds"] < 0) == approves
    assert agent.stop() == 0


@pytest.mark.parametrize("answer,approved", [(400, False), (429, True), (500, True)])
def test_approval_answers(simulator, agent_run, clock, tmp_path, answer, approved):
    sim = simulator(scenario(), speed=1.0, first_call_delay=0.0, clock=clock)
    sim.inject_approval(answer, 2)
    agent = agent_run(sim.url, extra=policy({}, [{"approve": "at-once"}]))
    assert agent.wait_for(lambda a: started(a) is not None, 120)
    assert ("Approved" in phases(agent)) == approved
    assert len(posts(sim)) == (1 if answer == 400 else 3)  # 400 is final; the others retried
    given_up = agent.messages("approval not sent; the event starts at NotBefore")
    assert len(given_up) == (0 if approved else 1)
    if not approved:
        assert "HTTP 400" in given_up[0]["reason"] and started(agent)["StartDelaySeconds"] >= 0
    assert agent.stop() == 0
    st = agent.status_json()
    assert (st["approvals_sent"], st["approvals_failed"]) == ((1, 0) if approved else (0, 1))


def test_post_hooks_run_on_removed_with_the_outcome(simulator, agent_run, clock, tmp_path):
    after = hook(tmp_path, "after", "exit 0\n")
    sim, agent = start(
        simulator,
        agent_run,
        clock,
        tmp_path,
        policy({"after": {"command": [str(after)]}}, [{"post_hooks": ["after"]}]),
    )
    assert agent.wait_for(lambda a: a.messages("hook succeeded"), 120)
    assert runs(tmp_path, "after") == [f"post {sim.event_id(0)} Completed"]
    assert phases(agent) == ["FirstSeen", "Started", "Removed"]  # no approval asked for
    assert agent.stop() == 0


def test_dry_run_decides_logs_and_counts_but_runs_and_approves_nothing(
    simulator, agent_run, clock, tmp_path
):
    prep = hook(tmp_path, "prep", "exit 0\n")
    sim, agent = start(
        simulator,
        agent_run,
        clock,
        tmp_path,
        policy({"prep": {"command": [str(prep)]}}, [APPROVE_AFTER], dry_run=True),
    )
    assert agent.wait_for(lambda a: started(a) is not None, 120)
    assert runs(tmp_path, "prep") == [] and posts(sim) == []
    would_run = agent.messages("dry run: would run hook")
    assert len(would_run) == 1 and would_run[0]["command"] == [str(prep)]
    assert len(agent.messages("dry run: would approve")) == 1
    assert started(agent)["StartDelaySeconds"] >= 0
    assert agent.stop() == 0
    st = agent.status_json()
    assert (st["dry_run"], st["dry_run_decisions"], st["hooks_succeeded"]) == (True, 2, 0)


def test_pre_hooks_run_again_on_updated_when_the_rule_says_so(
    simulator, agent_run, clock, tmp_path
):
    prep = hook(tmp_path, "prep", "exit 0\n")
    sc = scenario(not_before=40.0, reschedule=[{"at": 8.0, "not_before": 60.0}])
    _sim, agent = start(
        simulator,
        agent_run,
        clock,
        tmp_path,
        policy(
            {"prep": {"command": [str(prep)]}}, [{"pre_hooks": ["prep"], "rerun_on_update": True}]
        ),
        sc=sc,
    )
    assert agent.wait_for(lambda a: len(a.messages("hook succeeded")) == 2, 120)
    assert phases(agent)[:2] == ["FirstSeen", "Updated"]
    updated = agent.records()[1]
    assert [m["phase"] for m in agent.messages("hook succeeded")] == [
        "pre",
        f"pre@{updated['DocumentIncarnation']}",
    ]
    assert len(runs(tmp_path, "prep")) == 2
    assert agent.stop() == 0


def test_hostile_bytes_in_an_event_never_silence_its_hooks(simulator, agent_run, clock, tmp_path):
    """A Description with a NUL (a valid JSON escape) and line breaks: the pre hook runs with a
    safe one-line value, the approval follows, and the post hook (an uncordon) runs too."""
    prep = hook(tmp_path, "prep", f'printf "%s" "$SE_DESCRIPTION" > {tmp_path}/prep.desc\n')
    after = hook(tmp_path, "after", "exit 0\n")
    sc = scenario(description="Host update\u0000\r\nline two")
    _sim, agent = start(
        simulator,
        agent_run,
        clock,
        tmp_path,
        policy(
            {"prep": {"command": [str(prep)]}, "after": {"command": [str(after)]}},
            [{**APPROVE_AFTER, "post_hooks": ["after"]}],
        ),
        sc=sc,
    )
    assert agent.wait_for(lambda a: len(a.messages("hook succeeded")) == 2, 120)
    assert phases(agent) == ["FirstSeen", "Approved", "Started", "Removed"]
    assert (tmp_path / "prep.desc").read_text() == "Host update\ufffd line two"
    first = json.loads((tmp_path / "agent-records.jsonl").read_text().splitlines()[0])
    assert first["Description"] == "Host update\u0000\r\nline two"  # the record: as served
    assert [m.get("env_characters_replaced") for m in agent.messages("hook started")] == [2, 2]
    assert not any("exception" in line for line in agent.lines)
    assert agent.stop() == 0
    st = agent.status_json()
    assert (st["hooks_succeeded"], st["hooks_failed"], st["approvals_sent"]) == (2, 0, 1)


# -- notifications that tell the truth (issue 18) -------------------------------------------------


@pytest.fixture
def slack(tmp_path):
    from se_forwarder_testbed.standins.webhooks import WebhookStandIn

    with WebhookStandIn(tmp_path / "tls") as hooks:
        url = tmp_path / "slack.url"
        url.write_text(hooks.url("slack") + "\n")
        hooks.section = (
            f'\n[sinks.webhook]\nurl_file = "{url}"\nformat = "slack"\n'
            f'ca_file = "{hooks.ca_cert}"\n'
        )
        yield hooks


def texts(hooks) -> list[str]:
    return [b["text"] for b in hooks.accepted("slack")]


def test_a_failed_drain_is_told_and_no_line_claims_it_worked(
    simulator, agent_run, clock, tmp_path, slack
):
    prep = hook(tmp_path, "prep", "exit 3\n")
    after = hook(tmp_path, "after", "exit 0\n")
    sim, agent = start(
        simulator,
        agent_run,
        clock,
        tmp_path,
        policy(
            {"prep": {"command": [str(prep)]}, "after": {"command": [str(after)]}},
            [{**APPROVE_AFTER, "post_hooks": ["after"]}],
        )
        + slack.section,
    )
    assert agent.wait_for(lambda a: len(texts(slack)) >= 4, 120), texts(slack)
    assert agent.stop() == 0
    said = texts(slack)
    event = f"Reboot {sim.event_id(0)[:8]} on vm-a (service rg-sim)"
    assert [t.split(" · ")[0] for t in said] == [
        f"{event}: announced",
        f"{event}: hook prep failed (exit 3)",
        said[2].split(" · ")[0],
        f"{event}: ended (Completed)",
    ], said
    assert said[2].startswith(f"{event}: started ") and "after NotBefore" in said[2]
    assert "at NotBefore (nobody approved it early)" in said[2]
    assert "policy: will run prep, then approve it; will run after when it ends (rule 1)" in said[0]
    assert said[1].endswith("policy: not approved: it starts at NotBefore")
    # the drain failed but ran: the hook after it runs, and the line says what the event got
    assert "policy" not in said[2]
    assert said[3].endswith("policy: rule 1: prep failed; after runs now it has ended")
    assert len(agent.messages("notice")) == 1


def test_after_a_drain_and_an_approval_no_line_says_it_was_not_approved(
    simulator, agent_run, clock, tmp_path, slack
):
    prep = hook(tmp_path, "prep", "exit 0\n")
    _sim, agent = start(
        simulator,
        agent_run,
        clock,
        tmp_path,
        policy({"prep": {"command": [str(prep)]}}, [APPROVE_AFTER]) + slack.section,
    )
    assert agent.wait_for(lambda a: len(texts(slack)) >= 4, 120), texts(slack)
    assert agent.stop() == 0
    said = texts(slack)
    assert [t.split(" · ")[0].split(": ")[1].split(" ")[0] for t in said] == [
        "announced",
        "approved",
        "started",
        "ended",
    ], said
    assert "early" in said[2] and not any("not approved" in t for t in said)


def test_an_approval_given_up_is_told(simulator, agent_run, clock, tmp_path, slack):
    sim = simulator(scenario(), speed=1.0, first_call_delay=0.0, clock=clock)
    sim.inject_approval(400, 2)
    agent = agent_run(sim.url, extra=policy({}, [{"approve": "at-once"}]) + slack.section)
    assert agent.wait_for(lambda a: any("approval given up" in t for t in texts(slack)), 120), (
        texts(slack)
    )
    [given_up] = [t for t in texts(slack) if "approval given up" in t]
    assert given_up.startswith(
        f"Reboot {sim.event_id(0)[:8]} on vm-a (service rg-sim): approval given up "
        "(refused: HTTP 400"
    )
    assert given_up.endswith("policy: it starts at NotBefore")


def sunk(tmp_path: Path, name: str = "agent") -> list[dict]:
    """The records as the file sink wrote them (every column)."""
    path = tmp_path / f"{name}-records.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def test_a_preset_and_a_drain_rule_run_both_hooks_and_say_what_the_event_got(
    simulator, agent_run, clock, tmp_path
):
    """Issue 32's case: preset "microsoft" and a rule "drain before reboots"; a Reboot you
    start yourself is drained, approved, and drained "post" when it ends: both hooks."""
    drain = hook(tmp_path, "drain", "exit 0\n")
    rule = {
        "name": "drain before reboots",
        "event_types": ["Reboot"],
        "pre_hooks": ["drain"],
        "post_hooks": ["drain"],
        "approve": "after-hooks",
    }
    sim, agent = start(
        simulator,
        agent_run,
        clock,
        tmp_path,
        policy({"drain": {"command": [str(drain)]}}, [rule], preset="microsoft"),
    )
    assert agent.wait_for(lambda a: len(a.messages("hook succeeded")) == 2, 120)
    eid = sim.event_id(0)
    assert runs(tmp_path, "drain") == [f"pre {eid} ", f"post {eid} Completed"]
    assert agent.stop() == 0
    got = 'rule 1 "drain before reboots": drain ok, approved by this VM'
    by = {r["Phase"]: r for r in sunk(tmp_path)}
    assert list(by) == ["FirstSeen", "Approved", "Started", "Removed"]
    assert by["FirstSeen"]["Acted"] is None  # the policy decides after it is committed
    assert [by[p]["Acted"] for p in ("Approved", "Started", "Removed")] == [got] * 3
    assert [by[p]["ApprovedBy"] for p in ("Approved", "Started", "Removed")] == ["ThisVm"] * 3
    text = agent.status_text()
    assert f"acted on:     {eid[:8]} Reboot: {got}; after it: drain ok" in text


def test_a_reboot_azure_approved_itself_is_recorded_as_such(simulator, agent_run, clock, tmp_path):
    """userInitiatedReboot with automaticallyApprove: no Scheduled, only Started; nobody here
    approved it, and the records say Azure's policy did."""
    sc = scenario(started=True, not_before=None, source="User")
    sim, agent = start(simulator, agent_run, clock, tmp_path, "", sc=sc)
    assert agent.wait_for(lambda a: "Removed" in phases(a), 120)
    assert agent.stop() == 0
    assert posts(sim) == []
    by = {r["Phase"]: r["ApprovedBy"] for r in sunk(tmp_path)}
    assert by == {"FirstSeen": None, "Started": "AzurePolicy", "Removed": "AzurePolicy"}
