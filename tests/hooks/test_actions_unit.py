"""The controller itself, in process with real hook processes and a real state database: any
exception around a hook run ends as a journaled, counted, logged failure (never a dead lane, a
journal left at ``started`` and a traceback on standard error)."""

from __future__ import annotations

import logging
import time
from pathlib import Path

from helpers.actions import hook, runs

from se_forwarder.actions.controller import Actions
from se_forwarder.hooks import Journal
from se_forwarder.model import LifecycleRecord, VmIdentity
from se_forwarder.outbox import Store
from se_forwarder.policy import PolicyConfig

VM = VmIdentity(VmName="vm-a", Computer="vm-a")


def record(**over) -> LifecycleRecord:
    base = {"TimeGenerated": "2026-01-01T00:00:00.000Z", "RecordId": "r1",
            "Phase": "FirstSeen", "Outcome": None, "EventId": "e-1", "EventType": "Reboot",
            "EventStatus": "Scheduled", "EventSource": "User", "ResourceType": "VirtualMachine",
            "Resources": ["vm-a"], "Description": "restart", "DurationInSeconds": -1,
            "NotBefore": "2099-01-01T00:15:00.000Z", "DocumentIncarnation": 2,
            "FirstSeenAt": "2026-01-01T00:00:00.000Z", "StartedAt": None, "NoticeSeconds": 900.0,
            "SinceFirstSeenSeconds": 0.0, "StartDelaySeconds": None, "SinceStartedSeconds": None,
            "UncertaintySeconds": 1.0, "AffectsThisVm": True, "vm": VM}
    base.update(over)
    return LifecycleRecord(**base)


def actions(tmp_path: Path, rule: dict, **hooks: Path) -> tuple[Actions, Journal]:
    config = PolicyConfig.model_validate({
        "hooks": {name: {"command": [str(path)]} for name, path in hooks.items()},
        "rules": [rule]})
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
    act, journal = actions(tmp_path, {"pre_hooks": ["prep"], "post_hooks": ["after"]},
                           prep=prep, after=after)
    act.on_records([record(Description="a\u0000b")])
    act.on_records([record(Phase="Removed", Outcome="Completed", Description="a\u0000b")])
    settle(act, lambda: act.stats().hooks_succeeded + act.stats().hooks_failed == 2)
    assert runs(tmp_path, "prep") == ["pre e-1 "] and runs(tmp_path, "after") == ["post e-1 Completed"]
    assert journal.get("e-1", "pre", "prep").state == "ok"
    assert journal.get("e-1", "post", "after").state == "ok"
    assert (act.stats().hooks_succeeded, act.stats().hooks_failed) == (2, 0)
