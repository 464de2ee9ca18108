"""From an event to a decision: the first rule that matches, and whether this VM may act.

Pure: no clock, no I/O. The rule is chosen per event, not per record: the agent binds an event to
the first rule that acts on it and decides every later record of that event by the same rule
(``Policy.decide(record, bound=...)``), so a record that another rule would match (a ``Removed``
seen ``Started``) never runs that other rule's hooks. The agent acts only on events that affect this
VM; an approval releases
the event for every VM in ``Resources``, so an event naming other VMs too is approved only under
``multi_vm = "leader"``, and then only by the VM whose name sorts first.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..model import EventStatus, LifecycleRecord, vm_name_key
from .config import EventMatch, PolicyConfig, RuleConfig


@dataclass(frozen=True, slots=True)
class Facts:
    """What a rule can match on, taken from a lifecycle record."""

    event_id: str
    event_type: str
    source: str | None
    status: str
    duration: int | None
    resources: tuple[str, ...]
    affects: bool | None
    vm_name: str | None
    not_before: str | None

    @classmethod
    def of(cls, r: LifecycleRecord) -> Facts:
        return cls(
            r.EventId,
            r.EventType,
            r.EventSource,
            r.EventStatus,
            r.DurationInSeconds,
            tuple(r.Resources),
            r.AffectsThisVm,
            r.VmName,
            r.NotBefore,
        )


@dataclass(frozen=True, slots=True)
class Decision:
    rule: RuleConfig | None  # None: no rule matched (observe only)
    number: int | None  # 1-based position among the effective rules
    acts_here: bool  # the event affects this VM: hooks may run here
    may_approve: bool  # this VM approves (when the rule says so)
    why_not: str | None = None  # why this VM does not approve although the rule would

    @property
    def pre_hooks(self) -> tuple[str, ...]:
        return tuple(self.rule.pre_hooks) if self.rule and self.acts_here else ()

    @property
    def post_hooks(self) -> tuple[str, ...]:
        return tuple(self.rule.post_hooks) if self.rule and self.acts_here else ()

    @property
    def approve(self) -> str:
        return self.rule.approve if self.rule and self.may_approve else "never"

    @property
    def label(self) -> str:
        if self.rule is None:
            return "no rule"
        return f"rule {self.number}" + (f' "{self.rule.name}"' if self.rule.name else "")


def matches_event(rule: EventMatch, f: Facts) -> bool:
    """The event's own conditions (the agent's rules and the collector's share them)."""
    if rule.event_types and f.event_type not in rule.event_types:
        return False
    if rule.event_sources and f.source not in rule.event_sources:
        return False
    if rule.event_statuses and f.status not in rule.event_statuses:
        return False
    if rule.min_duration is not None or rule.max_duration is not None:
        if f.duration is None:
            return False
        if rule.min_duration is not None and f.duration < rule.min_duration:
            return False
        if rule.max_duration is not None and f.duration > rule.max_duration:
            return False
    return True


def matches(rule: RuleConfig, f: Facts) -> bool:
    if not matches_event(rule, f):
        return False
    if rule.affects_this_vm is not None and bool(f.affects) != rule.affects_this_vm:
        return False
    n = len(f.resources)
    if rule.min_resources is not None and n < rule.min_resources:
        return False
    return rule.max_resources is None or n <= rule.max_resources


def leader(resources: Sequence[str]) -> str | None:
    """The VM that approves an event naming several VMs: the first name in sort order."""
    return min((vm_name_key(r) for r in resources), default=None)


def decide(rules: Sequence[RuleConfig], f: Facts) -> Decision:
    for number, rule in enumerate(rules, 1):
        if matches(rule, f):
            return _for_this_vm(rule, number, f)
    return Decision(None, None, acts_here=bool(f.affects), may_approve=False)


def _for_this_vm(rule: RuleConfig, number: int, f: Facts) -> Decision:
    here = f.affects is True
    if rule.approve == "never":
        return Decision(rule, number, here, False)
    why = None
    if not here:
        why = "it does not affect this VM" if f.affects is False else "this VM's name is unknown"
    elif f.status == EventStatus.STARTED:
        why = "it has already started"
    elif not f.not_before:
        why = "it has no NotBefore to bring forward"
    else:
        me = vm_name_key(f.vm_name or "")
        others = {vm_name_key(r) for r in f.resources} - {me}
        if others and rule.approve == "service":
            why = (
                f"it names other VMs too ({len(others)}): one approval would put them all "
                "in impact, past the service's count"
            )
        elif others and rule.multi_vm == "never":
            why = f'it names other VMs too ({len(others)}) and the rule says multi_vm = "never"'
        elif others and leader(f.resources) != me:
            why = f"{leader(f.resources)} approves it (first in Resources)"
    return Decision(rule, number, here, why is None, why)


def fingerprint(rule: RuleConfig) -> str:
    """What a rule is, for a binding kept across restarts: a changed rule is not the same one."""
    return rule.model_dump_json()


class Policy:
    """The configured policy, ready to decide (the effective rules computed once)."""

    def __init__(self, config: PolicyConfig) -> None:
        self.config = config
        self.rules = config.effective_rules()
        self.dry_run = config.dry_run
        self._prints = [fingerprint(r) for r in self.rules]

    def decide(self, record: LifecycleRecord, bound: int | None = None) -> Decision:
        """``bound``: the number of the rule this event is bound to (that rule decides)."""
        return self.decide_facts(Facts.of(record), bound)

    def decide_facts(self, facts: Facts, bound: int | None = None) -> Decision:
        if bound is not None and 1 <= bound <= len(self.rules):
            return _for_this_vm(self.rules[bound - 1], bound, facts)
        return decide(self.rules, facts)

    def number_of(self, number: int, printed: str) -> int | None:
        """A binding saved by an earlier run, if rule ``number`` is still the rule it was."""
        ok = 1 <= number <= len(self.rules) and self._prints[number - 1] == printed
        return number if ok else None

    def print_of(self, number: int) -> str:
        return self._prints[number - 1]
