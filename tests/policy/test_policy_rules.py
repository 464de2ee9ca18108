"""The policy: ordered rules, first match wins; the default observes only; Microsoft's preset;
who may approve an event naming several VMs; every refusal names the key; the policy in words."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from se_forwarder.config import Config, load
from se_forwarder.errors import ConfigError
from se_forwarder.policy import Facts, Policy, PolicyConfig, decide
from se_forwarder.policy.match import leader
from se_forwarder.policy.words import describe

NB = "2026-01-01T00:15:00.000Z"


def facts(
    type_="Reboot",
    source="Platform",
    status="Scheduled",
    duration=-1,
    resources=("vm-a",),
    affects=True,
    vm="vm-a",
    not_before=NB,
) -> Facts:
    return Facts("e1", type_, source, status, duration, tuple(resources), affects, vm, not_before)


@pytest.fixture
def hook(tmp_path: Path) -> str:
    path = tmp_path / "hook.sh"
    path.write_text("#!/bin/sh\nexit 0\n")
    path.chmod(0o755)
    return str(path)


def policy(hook: str, rules: list[dict], **kw) -> PolicyConfig:
    return PolicyConfig.model_validate(
        {
            "hooks": {"drain": {"command": [hook]}, "uncordon": {"command": [hook]}},
            "rules": rules,
            **kw,
        }
    )


def test_the_default_policy_observes_only():
    assert Config().policy is None  # no [policy]: the default, which observes
    p = PolicyConfig()
    assert not p.acts and p.effective_rules() == []
    d = Policy(p).decide_facts(facts())
    assert (d.rule, d.pre_hooks, d.post_hooks, d.approve) == (None, (), (), "never")


def test_the_first_matching_rule_decides(hook):
    p = Policy(
        policy(
            hook,
            [
                {
                    "name": "short freezes",
                    "event_types": ["Freeze"],
                    "max_duration": 8,
                    "approve": "at-once",
                },
                {
                    "name": "reboots",
                    "event_types": ["Reboot", "Redeploy"],
                    "pre_hooks": ["drain"],
                    "post_hooks": ["uncordon"],
                    "approve": "after-hooks",
                },
                {"name": "anything else", "pre_hooks": ["uncordon"]},
            ],
        )
    )
    freeze = p.decide_facts(facts("Freeze", duration=5))
    assert (freeze.number, freeze.approve, freeze.pre_hooks) == (1, "at-once", ())
    reboot = p.decide_facts(facts("Reboot"))
    assert (reboot.number, reboot.pre_hooks, reboot.post_hooks, reboot.approve) == (
        2,
        ("drain",),
        ("uncordon",),
        "after-hooks",
    )
    long_freeze = p.decide_facts(facts("Freeze", duration=30))
    assert long_freeze.number == 3 and long_freeze.approve == "never"


@pytest.mark.parametrize(
    "rule,f,expected",
    [
        ({"event_sources": ["User"]}, facts(source="User"), True),
        ({"event_sources": ["User"]}, facts(source=None), False),
        ({"event_statuses": ["Scheduled"]}, facts(status="Started"), False),
        ({"min_duration": 0, "max_duration": 8}, facts(duration=8), True),
        ({"min_duration": 0, "max_duration": 8}, facts(duration=9), False),
        ({"min_duration": 0, "max_duration": 8}, facts(duration=-1), False),
        (
            {"min_duration": 0},
            facts(duration=None),
            False,
        ),  # no DurationInSeconds: no range matches
        ({"affects_this_vm": True}, facts(affects=False), False),
        ({"affects_this_vm": False}, facts(affects=False), True),
        ({"min_resources": 2}, facts(resources=("vm-a",)), False),
        ({"max_resources": 1}, facts(resources=("vm-a", "vm-b")), False),
        ({"max_resources": 2, "min_resources": 2}, facts(resources=("vm-a", "vm-b")), True),
        ({"event_types": ["freeze"]}, facts("Freeze"), True),  # written back as Azure spells it
    ],
)
def test_each_condition(rule, f, expected):
    p = PolicyConfig.model_validate({"rules": [rule]})
    assert (decide(p.rules, f).rule is not None) == expected


def test_your_rules_first_then_microsofts_preset_for_what_they_leave(hook):
    p = Policy(
        policy(
            hook,
            [
                {
                    "name": "mine",
                    "event_types": ["Reboot", "Redeploy"],
                    "pre_hooks": ["drain"],
                    "approve": "after-hooks",
                }
            ],
            preset="microsoft",
        )
    )
    assert [r.name for r in p.rules] == [
        "mine",
        "microsoft: user-initiated",
        "microsoft: short freeze",
    ]
    user = p.decide_facts(facts("Reboot", source="User"))  # yours, not the preset's at once
    assert (user.number, user.rule.name, user.pre_hooks, user.approve) == (
        1,
        "mine",
        ("drain",),
        "after-hooks",
    )
    user_freeze = p.decide_facts(facts("Freeze", source="User"))
    assert (user_freeze.rule.name, user_freeze.approve) == ("microsoft: user-initiated", "at-once")
    for duration, rule in ((0, "microsoft: short freeze"), (8, "microsoft: short freeze")):
        d = p.decide_facts(facts("Freeze", duration=duration))
        assert d.rule.name == rule, duration
    for duration in (9, -1):  # neither yours nor the preset's: observed only
        assert p.decide_facts(facts("Freeze", duration=duration)).rule is None
    redeploy = p.decide_facts(facts("Redeploy"))
    assert redeploy.rule.name == "mine" and redeploy.pre_hooks == ("drain",)


def test_an_event_bound_to_a_rule_is_decided_by_it_whatever_a_later_record_matches(hook):
    p = Policy(
        policy(
            hook,
            [
                {"name": "quick", "event_statuses": ["Scheduled"], "approve": "at-once"},
                {"name": "drain", "pre_hooks": ["drain"], "post_hooks": ["uncordon"]},
            ],
        )
    )
    first = p.decide_facts(facts())
    assert (first.number, first.rule.name) == (1, "quick")
    ended = facts(status="Started", not_before=None)
    assert p.decide_facts(ended).rule.name == "drain"  # by record: the other rule's post-hooks
    bound = p.decide_facts(ended, bound=first.number)
    assert (bound.rule.name, bound.post_hooks) == ("quick", ())
    # a binding saved by an earlier run holds only while the rule is the same
    assert p.number_of(1, p.print_of(1)) == 1
    assert p.number_of(1, p.print_of(2)) is None and p.number_of(7, p.print_of(1)) is None


def test_nothing_is_done_for_an_event_that_does_not_affect_this_vm(hook):
    p = Policy(
        policy(
            hook,
            [
                {
                    "pre_hooks": ["drain"],
                    "post_hooks": ["uncordon"],
                    "approve": "at-once",
                    "multi_vm": "leader",
                }
            ],
        )
    )
    d = p.decide_facts(facts(resources=("vm-b",), affects=False))
    assert (d.pre_hooks, d.post_hooks, d.approve, d.may_approve) == ((), (), "never", False)
    assert "does not affect this VM" in d.why_not


def test_multi_vm_events_are_not_approved_unless_the_rule_elects_a_leader(hook):
    never = Policy(policy(hook, [{"approve": "at-once"}]))
    both = ("vm-b", "vm-a")
    d = never.decide_facts(facts(resources=both))
    assert d.approve == "never" and 'multi_vm = "never"' in d.why_not
    lead = Policy(policy(hook, [{"approve": "at-once", "multi_vm": "leader"}]))
    assert lead.decide_facts(facts(resources=both, vm="vm-a")).approve == "at-once"
    follower = lead.decide_facts(facts(resources=both, vm="vm-b"))
    assert follower.approve == "never" and "vm-a approves it" in follower.why_not


def test_the_leader_is_the_first_name_in_sort_order_ignoring_case_and_old_underscores():
    assert leader(["WestNO_1", "_westno_0"]) == "westno_0"
    d = decide(
        PolicyConfig.model_validate(
            {"rules": [{"approve": "at-once", "multi_vm": "leader"}]}
        ).rules,
        facts(resources=("_WestNO_0", "WestNO_1"), vm="westno_0"),
    )
    assert d.may_approve


@pytest.mark.parametrize(
    "f,why",
    [
        (facts(status="Started", not_before=None), "already started"),
        (facts(not_before=None), "no NotBefore"),
        (facts(affects=None, vm=None), "name is unknown"),
    ],
)
def test_no_approval_without_a_time_to_bring_forward_or_a_known_vm(f, why):
    d = decide(PolicyConfig.model_validate({"rules": [{"approve": "at-once"}]}).rules, f)
    assert not d.may_approve and why in d.why_not


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.toml"
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    "text,named",
    [
        ('[[policy.rules]]\npre_hooks = ["drain"]\n', "names hook 'drain', which is not defined"),
        ('[[policy.rules]]\nevent_types = ["Reboo"]\n', "unknown EventType 'Reboo'"),
        ("[[policy.rules]]\nmin_duration = 9\nmax_duration = 0\n", "min_duration (9) is above"),
        ('[[policy.rules]]\napprove = "sometimes"\n', "policy.rules.0.approve"),
        (
            '[[policy.rules]]\naffects_this_vm = false\napprove = "at-once"\n',
            "only on events that affect this VM",
        ),
        (
            '[policy.hooks.drain]\ncommand = ["/nonexistent/drain"]\n',
            "/nonexistent/drain: no such file",
        ),
        ('[policy.hooks.drain]\ncommand = ["no-such-program-anywhere"]\n', "not found on PATH"),
        ('[policy.hooks.drain]\ncommand = "echo hi"\n', "command is an argv list"),
        (
            '[policy.hooks.h]\ncommand = "notify.cmd %SE_DESCRIPTION%"\nshell = true\n',
            "%SE_DESCRIPTION% in a shell = true line",
        ),
        ('[policy.hooks.h]\ncommand = "echo %se_eventtype%"\nshell = true\n', "cmd.exe expands it"),
        # issue 33: the substring and substitution forms, delayed expansion, and cmd in argv
        ('[policy.hooks.h]\ncommand = "echo %SE_DESCRIPTION:~0%"\nshell = true\n', "expands it"),
        ('[policy.hooks.h]\ncommand = "echo %se_description:a=b%"\nshell = true\n', "expands it"),
        ('[policy.hooks.h]\ncommand = "echo !SE_EventId!"\nshell = true\n', "expands it"),
        (
            '[policy.hooks.h]\ncommand = ["cmd", "/c", "echo %SE_DESCRIPTION%"]\n',
            "%SE_DESCRIPTION% in the arguments of cmd",
        ),
        (
            '[policy.hooks.h]\ncommand = ["C:\\\\Windows\\\\System32\\\\CMD.EXE", "/c", '
            '"x %se_x:~1,2%"]\n',
            "cmd.exe expands it",
        ),
        ('[policy.hooks.h]\ncommand = ["notify.bat", "%SE_EVENTID%"]\n', "cmd.exe expands it"),
        ('[policy.hooks."bad name"]\ncommand = ["true"]\n', "hook name 'bad name'"),
        ('[policy]\npreset = "yolo"\n', "policy.preset"),
        ('[policy.hooks.drain]\ncommand = ["true", "a\\u0000b"]\n', "a NUL character"),
        (
            '[policy.hooks.drain]\ncommand = ["true"]\nenv = { X = "a\\u0000b" }\n',
            "a NUL character",
        ),
        ('[policy.hooks.drain]\ncommand = ["true"]\nenv = { "A=B" = "x" }\n', "holds '='"),
    ],
)
def test_bad_policies_are_refused_naming_the_key(tmp_path, text, named):
    with pytest.raises(ConfigError) as err:
        load(write(tmp_path, text))
    assert named in str(err.value) and "policy" in str(err.value)


def test_a_hook_that_is_not_executable_is_refused(tmp_path):
    script = tmp_path / "drain.sh"
    script.write_text("#!/bin/sh\n")
    script.chmod(0o644)
    with pytest.raises(ConfigError, match="not executable"):
        load(write(tmp_path, f'[policy.hooks.drain]\ncommand = ["{script}"]\n'))


def test_a_shell_hook_is_one_string(tmp_path):
    cfg = load(
        write(tmp_path, '[policy.hooks.h]\ncommand = "echo hi | tr a-z A-Z"\nshell = true\n')
    )
    assert cfg.policy.hooks["h"].argv() == ["/bin/sh", "-c", "echo hi | tr a-z A-Z"]


def check_config(path: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "se_forwarder.cli", "check-config", "--config", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.process
def test_check_config_prints_the_policy_in_words_and_refuses_a_missing_hook(tmp_path, hook):
    good = write(
        tmp_path,
        f"""
[sinks.stdout]
[policy]
preset = "microsoft"
[policy.hooks.drain]
command = ["{hook}", "--grace", "60"]
timeout = 600
[[policy.rules]]
name = "drain reboots"
event_types = ["Reboot", "Redeploy"]
pre_hooks = ["drain"]
approve = "after-hooks"
""",
    )
    r = check_config(good)
    assert r.returncode == 0, r.stderr
    words = r.stderr
    assert 'rule 2 "microsoft: user-initiated": events from User' in words
    assert "Freeze events, while Scheduled, lasting 0 to 8 s" in words
    assert (
        f'rule 1 "drain reboots": Reboot or Redeploy events: when first seen, run drain '
        f"({hook} --grace 60; timeout 600 s); approve it once every hook before it "
        "succeeded; an event naming other VMs too is not approved"
    ) in words
    assert "your rules are tried first, in order, then the preset's" in words
    assert "decides for the whole event" in words
    assert "otherwise: observe only" in words
    Path(hook).unlink()
    r = check_config(good)
    assert r.returncode == 2 and r.stdout == ""
    assert f"policy.hooks.drain: {hook}: no such file" in r.stderr


def test_the_words_say_dry_run_and_observe_only():
    lines = describe(PolicyConfig(dry_run=True))
    assert "DRY RUN" in lines[0] and lines[2].startswith("  otherwise: observe only")


def test_the_words_say_when_hooks_after_it_run_and_which_rules_are_never_used(hook):
    lines = describe(
        policy(
            hook,
            [
                {"event_types": ["Reboot"], "pre_hooks": ["drain"], "post_hooks": ["uncordon"]},
                {
                    "pre_hooks": ["drain"],
                    "post_hooks": ["uncordon"],
                    "post_hooks_alone": True,
                },
                {"event_types": ["Freeze"], "post_hooks": ["uncordon"]},
            ],
            preset="microsoft",
        )
    )
    assert "when it ends (Removed), only if a hook before it ran here, run uncordon" in lines[2]
    assert "when it ends (Removed), even if no hook before it ran here, run uncordon" in lines[3]
    assert "when it ends (Removed) run uncordon" in lines[4]
    assert "never used" not in lines[3]
    assert all("(never used: rule 2 matches every event)" in line for line in lines[4:7])
