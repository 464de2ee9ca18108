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
        when = (
            "when it ends (Removed)"
            if not rule.pre_hooks
            else "when it ends (Removed), even if no hook before it ran here,"
            if rule.post_hooks_alone
            else "when it ends (Removed), only if a hook before it ran here,"
        )
        parts.append(
            f"{when} run " + ", then ".join(hook_words(h, hooks[h]) for h in rule.post_hooks)
        )
    if rule.approve == "service":
        parts.append(
            ("once every hook before it succeeded, " if rule.pre_hooks else "")
            + "approve it early only when the service's coordinator admits this VM (at most "
            "N of the service in impact at once, [policy.service]); else it starts at NotBefore"
        )
    elif rule.approve == "at-once":
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
            if rule.multi_vm == "leader" and rule.approve != "service"
            else "an event naming other VMs too is not approved"
        )
    return "; ".join(parts)


PRECEDENCE = (
    "  your rules are tried first, in order, then the preset's; the first rule that acts on an "
    "event decides for the whole event: its hooks before, its approval and its hooks after, "
    "whatever a later record of that event would match"
)


def matches_every_event(rule: RuleConfig) -> bool:
    """A rule without a single condition (the rules after it never decide anything)."""
    return conditions(rule) == "events"


def describe(policy: PolicyConfig) -> list[str]:
    """One line per rule, in the order they are tried, and what happens otherwise."""
    mode = (
        "DRY RUN: each decision is logged and counted; no hook runs and nothing is approved"
        if policy.dry_run
        else "hooks run and approvals are sent as below"
    )
    lines = [f"policy (preset {policy.preset}): {mode}", PRECEDENCE]
    catch_all = None
    for n, rule in enumerate(policy.effective_rules(), 1):
        name = f' "{rule.name}"' if rule.name else ""
        unused = f" (never used: rule {catch_all} matches every event)" if catch_all else ""
        lines.append(f"  rule {n}{name}: {conditions(rule)}: {actions(rule, policy.hooks)}{unused}")
        if catch_all is None and matches_every_event(rule):
            catch_all = n
    lines.append("  otherwise: observe only (record it; no hook, no approval)")
    lines.append("  hooks and approvals are only ever for events that affect this VM")
    return lines


def decision(d: Decision, dry_run: bool = False) -> str:
    """What the policy will do about one event, as a notification says it (read aloud by
    whoever is on call): "will run drain, then approve it; will run uncordon when it ends
    (rule 1)"."""
    if d.rule is None:
        return "observed only (no rule matched)"
    if not d.acts_here:
        return f"observed only ({d.label}; not this VM)"
    will = "would" if dry_run else "will"
    now = []
    if d.approve == "at-once":
        now.append("approve it now")
    if d.pre_hooks:
        now.append("run " + ", then ".join(d.pre_hooks))
    if d.approve == "after-hooks":
        now.append("approve it" if d.pre_hooks else "approve it now")
    elif d.approve == "service":
        now.append("ask the service's coordinator to approve it early")
    steps = [f"{will} " + ", then ".join(now)] if now else []
    if d.rule.approve != "never" and not d.may_approve and d.why_not:
        steps.append(f"{will} not approve it here: {d.why_not}")
    if d.post_hooks:
        steps.append(f"{will} run {', then '.join(d.post_hooks)} when it ends")
    text = "; ".join(steps) or "observe only"
    return f"{text} ({d.label}{', dry run' if dry_run else ''})"
