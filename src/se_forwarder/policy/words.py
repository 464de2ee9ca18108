"""The policy in words, for ``check-config`` and for notifications ("what the policy did")."""

from __future__ import annotations

import shlex

from .. import redact
from .config import HookConfig, PolicyConfig, RuleConfig
from .match import Decision


def _either(values: list[str], noun: str) -> str:
    if not values:
        return ""
    return (
        " or ".join(values) if len(values) < 3 else ", ".join(values[:-1]) + " or " + values[-1]
    ) + f" {noun}"


def conditions(rule: RuleConfig) -> str:
    """ "Reboot or Redeploy events from Platform, Scheduled, lasting 0 to 8 s, ..." """
    what = _either(rule.event_types, "events") or "events"
    if rule.event_sources:
        what += " from " + " or ".join(rule.event_sources)
    parts = [what]
    if rule.event_statuses:
        parts.append("while " + " or ".join(rule.event_statuses))
    lo, hi = rule.min_duration, rule.max_duration
    if lo is not None or hi is not None:
        parts.append(
            f"lasting {lo} to {hi} s"
            if lo is not None and hi is not None
            else f"lasting at least {lo} s"
            if lo is not None
            else f"lasting at most {hi} s"
        )
    rlo, rhi = rule.min_resources, rule.max_resources
    if rlo is not None or rhi is not None:
        parts.append(
            f"naming {rlo if rlo is not None else 0} to "
            f"{rhi if rhi is not None else 'any number of'} VMs"
        )
    if rule.affects_this_vm is not None:
        parts.append(
            "that affect this VM" if rule.affects_this_vm else "that do not affect this VM"
        )
    return ", ".join(parts)


def hook_words(name: str, hook: HookConfig) -> str:
    """The hook and its command, any URL's path and any secret in it masked."""
    cmd = (
        redact.setting(hook.command)
        if isinstance(hook.command, str)
        else shlex.join(redact.argv(hook.command))
    )
    shell = "shell: " if hook.shell else ""
    return f"{name} ({shell}{cmd}; timeout {hook.timeout:g} s)"


def actions(rule: RuleConfig, hooks: dict[str, HookConfig]) -> str:
    if not rule.acts:
        return "observe only (no hook, no approval)"
    parts = []
    if rule.pre_hooks:
        again = ", and again on each Updated" if rule.rerun_on_update else ""
        parts.append(
            "when first seen, run "
            + ", then ".join(hook_words(h, hooks[h]) for h in rule.pre_hooks)
            + again
        )
    if rule.post_hooks:
        parts.append(
            "when it ends (Removed), run "
            + ", then ".join(hook_words(h, hooks[h]) for h in rule.post_hooks)
        )
    if rule.approve == "at-once":
        parts.append("approve it at once")
    elif rule.approve == "after-hooks":
        parts.append(
            "approve it once every hook before it succeeded"
            if rule.pre_hooks
            else "approve it at once (no hook before it)"
        )
    else:
        parts.append("never approve it (it starts at NotBefore)")
    if rule.approve != "never":
        parts.append(
            "an event naming other VMs too is approved only by the VM named first in Resources"
            if rule.multi_vm == "leader"
            else "an event naming other VMs too is not approved"
        )
    return "; ".join(parts)


def describe(policy: PolicyConfig) -> list[str]:
    """One line per rule, in the order they are tried, and what happens otherwise."""
    mode = (
        "DRY RUN: each decision is logged and counted; no hook runs and nothing is approved"
        if policy.dry_run
        else "hooks run and approvals are sent as below"
    )
    lines = [f"policy (preset {policy.preset}): {mode}"]
    for n, rule in enumerate(policy.effective_rules(), 1):
        name = f' "{rule.name}"' if rule.name else ""
        lines.append(f"  rule {n}{name}: {conditions(rule)}: {actions(rule, policy.hooks)}")
    lines.append("  otherwise: observe only (record it; no hook, no approval)")
    lines.append("  hooks and approvals are only ever for events that affect this VM")
    return lines


def decision(d: Decision, dry_run: bool = False) -> str:
    """What the policy does about one event, as a notification says it."""
    if d.rule is None:
        return "observed only (no rule matched)"
    if not d.acts_here:
        return f"observed only ({d.label}; not this VM)"
    steps = []
    if d.pre_hooks:
        steps.append("run " + ", ".join(d.pre_hooks))
    if d.approve == "at-once":
        steps.append("approve at once")
    elif d.approve == "after-hooks":
        steps.append("then approve" if d.pre_hooks else "approve at once")
    elif d.rule.approve != "never" and d.why_not:
        steps.append(f"not approved here: {d.why_not}")
    if d.post_hooks:
        steps.append("after it: run " + ", ".join(d.post_hooks))
    text = ", ".join(steps) or "observe only"
    return (
        f"{'would ' if dry_run and steps else ''}{text} ({d.label}{', dry run' if dry_run else ''})"
    )
