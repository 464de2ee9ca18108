"""The controller itself, in process with real hook processes and a real state database: any
exception around a hook run ends as a journaled, counted, logged failure (never a dead lane, a
journal left at ``started`` and a traceback on standard error)."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

import pytest
from helpers.actions import hook, runs

from se_forwarder.actions.controller import Actions
from se_forwarder.hooks import Journal
from se_forwarder.model import LifecycleRecord, VmIdentity
from se_forwarder.outbox import Store
from se_forwarder.policy import PolicyConfig

VM = VmIdentity(VmName="vm-a", Computer="vm-a")


def record(**over) -> LifecycleRecord:
    base = {
        "TimeGenerated": "2026-01-01T00:00:00.000Z",
        "RecordId": "r1",
        "Phase": "FirstSeen",
        "Outcome": None,
        "EventId": "e-1",
        "EventType": "Reboot",
        "EventStatus": "Scheduled",
        "EventSource": "User",
        "ResourceType": "VirtualMachine",
        "Resources": ["vm-a"],
        "Description": "restart",
        "DurationInSeconds": -1,
        "NotBefore": "2099-01-01T00:15:00.000Z",
        "DocumentIncarnation": 2,
        "FirstSeenAt": "2026-01-01T00:00:00.000Z",
        "StartedAt": None,
        "NoticeSeconds": 900.0,
        "SinceFirstSeenSeconds": 0.0,
        "StartDelaySeconds": None,
        "SinceStartedSeconds": None,
        "UncertaintySeconds": 1.0,
        "AffectsThisVm": True,
        "vm": VM,
    }
    base.update(over)
    return LifecycleRecord(**base)


def actions(tmp_path: Path, rule: dict, **hooks: Path) -> tuple[Actions, Journal]:
    config = PolicyConfig.model_validate(
        {"hooks": {name: {"command": [str(path)]} for name, path in hooks.items()}, "rules": [rule]}
    )
    journal = Journal(Store(tmp_path / "state"))
    return Actions(config, journal, None), journal


def settle(act: Actions, done, timeout: float = 20.0) -> None:
    """Wait until ``done()`` (the lanes' work is over), then stop the controller."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not done():
        time.sleep(0.02)
    act.stop(grace=10)


def test_an_exception_before_the_hook_starts_is_a_recorded_failure(tmp_path, caplog):
    prep = hook(tmp_path, "prep", "exit 0\n")
    act, journal = actions(tmp_path, {"pre_hooks": ["prep"]}, prep=prep)
    with caplog.at_level(logging.INFO, logger="se_forwarder"):
        act.on_records([record(NotBefore="not a time")])  # the environment cannot be built
        act.stop(grace=10)
    assert runs(tmp_path, "prep") == []
    assert journal.get("e-1", "pre", "prep").state == "error"
    assert act.stats().hooks_failed == 1
    [line] = [r for r in caplog.records if r.getMessage().startswith("hook not run: internal")]
    assert line.exc_info is not None and line.fields["hook"] == "prep"


def test_pre_and_post_hooks_run_for_an_event_with_a_nul_in_it(tmp_path):
    prep = hook(tmp_path, "prep", "exit 0\n")
    after = hook(tmp_path, "after", "exit 0\n")
    act, journal = actions(
        tmp_path, {"pre_hooks": ["prep"], "post_hooks": ["after"]}, prep=prep, after=after
    )
    act.on_records([record(Description="a\u0000b")])
    act.on_records([record(Phase="Removed", Outcome="Completed", Description="a\u0000b")])
    settle(act, lambda: act.stats().hooks_succeeded + act.stats().hooks_failed == 2)
    assert runs(tmp_path, "prep") == ["pre e-1 "] and runs(tmp_path, "after") == [
        "post e-1 Completed"
    ]
    assert journal.get("e-1", "pre", "prep").state == "ok"
    assert journal.get("e-1", "post", "after").state == "ok"
    assert (act.stats().hooks_succeeded, act.stats().hooks_failed) == (2, 0)


# -- notices: told once, through the outbox (issue 18) --------------------------------------------


def notices_in(journal: Journal) -> list[dict]:
    store = journal.store
    store.register_sinks(["webhook"])
    return [json.loads(r.payload) for r in store.fetch("webhook", 1000) if r.table == "notices"]


def test_a_failed_pre_hook_is_told_once_with_what_it_means(tmp_path):
    prep = hook(tmp_path, "prep", "exit 3\n")
    more = hook(tmp_path, "more", "exit 0\n")
    woken = []
    config = PolicyConfig.model_validate(
        {
            "hooks": {"prep": {"command": [str(prep)]}, "more": {"command": [str(more)]}},
            "rules": [{"pre_hooks": ["prep", "more"], "approve": "after-hooks"}],
        }
    )
    journal = Journal(Store(tmp_path / "state"))
    act = Actions(config, journal, None, wake=lambda: woken.append(1))
    act.on_records([record()])
    act.on_records([record(Phase="Updated", DocumentIncarnation=3)])  # the same hook: no rerun
    settle(act, lambda: len(notices_in(journal)) >= 1 and not act.stats().hooks_running)
    [n] = notices_in(journal)
    assert (n["Notice"], n["Hook"], n["HookPhase"], n["HookState"], n["ExitCode"]) == (
        "HookFailed",
        "prep",
        "pre",
        "failed",
        3,
    )
    assert n["Reason"] == "failed (exit 3)" and n["EventId"] == "e-1" and n["VmName"] == "vm-a"
    assert n["Consequence"] == "not run: more; not approved: it starts at NotBefore"
    assert woken and runs(tmp_path, "more") == []


def test_an_event_that_starts_while_its_hook_runs_is_told_once(tmp_path):
    prep = hook(tmp_path, "prep", "sleep 2\n")
    act, journal = actions(tmp_path, {"pre_hooks": ["prep"]}, prep=prep)
    act.on_records([record()])
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not runs(tmp_path, "prep"):
        time.sleep(0.02)
    started = record(Phase="Started", EventStatus="Started", NotBefore=None)
    act.on_records([started])
    act.on_records([started])  # seen again (a restart, a second record): told once
    act.on_records([record(EventId="e-2", Phase="Started", EventStatus="Started")])  # no hook
    settle(act, lambda: act.stats().hooks_succeeded == 1)
    [n] = notices_in(journal)
    assert (n["Notice"], n["Hook"], n["Reason"]) == (
        "StartedBeforeHooks",
        "prep",
        "hook prep was still running",
    )


# -- rules per event: a pre-hook and its post-hook are a pair (issue 32) --------------------------


def actions_of(tmp_path: Path, config: dict) -> tuple[Actions, Journal]:
    journal = Journal(Store(tmp_path / "state"))
    return Actions(PolicyConfig.model_validate(config), journal, None), journal


def removed(**over) -> LifecycleRecord:
    return record(
        Phase="Removed", Outcome="Completed", EventStatus="Started", NotBefore=None, **over
    )


def test_a_preset_and_a_drain_rule_run_both_hooks_for_a_user_reboot(tmp_path):
    """The issue's case: preset "microsoft" and "drain before reboots": your rule first, so the
    drain runs, then the approval, and the hook after it when the reboot ends."""
    drain = hook(tmp_path, "drain", "exit 0\n")
    act, _ = actions_of(
        tmp_path,
        {
            "preset": "microsoft",
            "hooks": {"drain": {"command": [str(drain)]}},
            "rules": [
                {
                    "name": "drain before reboots",
                    "event_types": ["Reboot"],
                    "pre_hooks": ["drain"],
                    "post_hooks": ["drain"],
                    "approve": "after-hooks",
                }
            ],
        },
    )
    act.on_records([record()])  # a user-initiated Reboot, Scheduled
    act.on_records([removed()])
    settle(act, lambda: act.stats().hooks_succeeded == 2)
    assert runs(tmp_path, "drain") == ["pre e-1 ", "post e-1 Completed"]
    [line] = act.stats().acted_events
    assert line == 'e-1 Reboot: rule 1 "drain before reboots": drain ok; after it: drain ok'


def test_a_rule_bound_at_first_sight_decides_the_end_too(tmp_path):
    """Rule 1 approves the Scheduled reboot at once; the Removed (last seen Started) would match
    rule 2 by itself, whose hook after it must not run: its drain never did."""
    drain = hook(tmp_path, "drain", "exit 0\n")
    uncordon = hook(tmp_path, "uncordon", "exit 0\n")
    act, journal = actions_of(
        tmp_path,
        {
            "hooks": {"drain": {"command": [str(drain)]}, "uncordon": {"command": [str(uncordon)]}},
            "rules": [
                {"name": "quick", "event_statuses": ["Scheduled"], "approve": "at-once"},
                {"event_types": ["Reboot"], "pre_hooks": ["drain"], "post_hooks": ["uncordon"]},
            ],
        },
    )
    act.on_records([record()])
    act.on_records([removed()])
    settle(act, lambda: False, timeout=1.0)
    assert runs(tmp_path, "drain") == [] and runs(tmp_path, "uncordon") == []
    assert journal.bound("e-1")[0] == 1
    journal.store.close()
    # a restart keeps the binding: the new controller decides the Removed by rule 1 too
    again, _ = actions_of(
        tmp_path,
        {
            "hooks": {"drain": {"command": [str(drain)]}, "uncordon": {"command": [str(uncordon)]}},
            "rules": [
                {"name": "quick", "event_statuses": ["Scheduled"], "approve": "at-once"},
                {"event_types": ["Reboot"], "pre_hooks": ["drain"], "post_hooks": ["uncordon"]},
            ],
        },
    )
    again.on_records([removed()])
    settle(again, lambda: False, timeout=1.0)
    assert runs(tmp_path, "uncordon") == []


@pytest.mark.parametrize("alone", [False, True])
def test_a_hook_after_it_runs_only_if_one_before_it_ran_unless_it_runs_alone(tmp_path, alone):
    """A rule for started events: the Scheduled record does not match it, the Removed (last seen
    Started) does; its pre-hook never ran, so its post-hook runs only if the rule says alone."""
    prep = hook(tmp_path, "prep", "exit 0\n")
    after = hook(tmp_path, "after", "exit 0\n")
    act, _ = actions_of(
        tmp_path,
        {
            "hooks": {"prep": {"command": [str(prep)]}, "after": {"command": [str(after)]}},
            "rules": [
                {
                    "event_statuses": ["Started"],
                    "pre_hooks": ["prep"],
                    "post_hooks": ["after"],
                    "post_hooks_alone": alone,
                }
            ],
        },
    )
    act.on_records([record()])
    act.on_records([removed()])
    settle(act, lambda: act.stats().hooks_succeeded == 1, timeout=3.0 if alone else 1.0)
    assert runs(tmp_path, "prep") == []
    assert runs(tmp_path, "after") == (["post e-1 Completed"] if alone else [])
    [line] = act.stats().acted_events
    assert line.endswith("after ok" if alone else "after not run: no hook before it ran")


@pytest.mark.parametrize(
    "vm,service",
    [
        (VmIdentity(Tags={"Service": "web"}, NodePool="np1", Cluster="AKS-1"), "tag:web"),
        (VmIdentity(NodePool="NP1", Cluster="AKS-1", ScaleSetName="ss"), "node-pool:aks-1/np1"),
        (VmIdentity(NodePool="np1", ScaleSetName="SS", ResourceGroup="rg"), "scale-set:ss"),
        (VmIdentity(ResourceGroup="RG"), "resource-group:rg"),
    ],
)
def test_the_service_a_vm_coordinates_in_is_the_fleet_views(vm, service):
    """Its tag, else its node pool (a pool without its cluster is no service: pool names repeat
    across clusters), else its scale set, else its resource group (fleet-vms.kql)."""
    from se_forwarder.actions.service_gate import service_of

    assert service_of(vm, "service") == service
