"""Notices: what the agent did not manage for an event, told to people once each.

A hook that failed, timed out, could not start or was interrupted by a restart; an approval
given up; an event that started before its hooks finished. The records say what Azure did; a
notice says what this VM's policy could not do about it, so a message never lets on-call think a
drain worked when it did not.

Notices travel like records, through the outbox (durable, in order, retried, dead-lettered), in
an outbox table of their own, ``notices``, that only the webhook sink takes: they are not part of
the record contract (the fleet view counts the same facts in the heartbeat's ``HooksFailed`` and
``ApprovalsFailed``). Each is committed together with a key in the state database
(``Store.claim``), so it is told once, even across a ``kill -9``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from .model import LifecycleRecord
from .outbox import OutboxRow, Store
from .timefmt import format_ms

TABLE = "notices"  # the outbox table (internal: no sink but the webhook takes it)
PREFIX = "notice|"  # its keys in the state database
KEEP_MS = 8 * 86_400_000  # keys of events no longer open are forgotten after this

HOOK_FAILED = "HookFailed"
APPROVAL_GIVEN_UP = "ApprovalGivenUp"
STARTED_BEFORE_HOOKS = "StartedBeforeHooks"
KINDS = (HOOK_FAILED, APPROVAL_GIVEN_UP, STARTED_BEFORE_HOOKS)
# The event's facts a notice repeats (from the event's last record), so it reads on its own.
EVENT_FIELDS = (
    "EventId",
    "EventType",
    "EventStatus",
    "EventSource",
    "Resources",
    "Description",
    "DurationInSeconds",
    "NotBefore",
    "AffectsThisVm",
    "Computer",
    "VmName",
    "VmId",
    "ResourceGroup",  # the service a message names (its tag, scale set or resource group)
    "ScaleSetName",
    "Tags",
    "Acted",  # what the policy did for the event so far
)


@dataclass(frozen=True, slots=True)
class Notice:
    kind: str  # one of KINDS
    record: LifecycleRecord  # the event's last record: its facts
    at_ms: int  # when it happened
    hook: str | None = None
    hook_phase: str | None = None  # pre, pre@<incarnation>, post
    state: str | None = None  # a hook's: failed, timeout, error, interrupted
    exit_code: int | None = None
    reason: str = ""  # what happened, in words ("exit 3", "NotBefore has passed")
    consequence: str = ""  # what it means for the event ("not approved: ...")

    @property
    def key(self) -> str:
        return (
            f"{PREFIX}{self.record.EventId}|{self.kind}|{self.hook or ''}|{self.hook_phase or ''}"
        )

    def payload(self) -> dict[str, Any]:
        facts = self.record.as_dict()
        return {
            "Notice": self.kind,
            "TimeGenerated": format_ms(self.at_ms),
            **{name: facts.get(name) for name in EVENT_FIELDS},
            "Hook": self.hook,
            "HookPhase": self.hook_phase,
            "HookState": self.state,
            "ExitCode": self.exit_code,
            "Reason": self.reason,
            "Consequence": self.consequence,
        }

    def row(self) -> OutboxRow:
        text = json.dumps(self.payload(), separators=(",", ":"), ensure_ascii=False)
        return OutboxRow(
            TABLE,
            self.record.vm.partition_key,
            text,
            len(text.encode("utf-8")),
            self.kind,
            self.record.EventType,
        )


def commit(store: Store, notice: Notice) -> bool:
    """Into the outbox, once: False when it was told before (or raises: the store failed)."""
    return store.claim(notice.key, {"at": notice.at_ms}, [notice.row()])


def prune(store: Store, open_ids: set[str], now_ms: int) -> int:
    """Forget the keys of events no longer open, once older than ``KEEP_MS``."""
    old = [
        k
        for k, v in store.scan(PREFIX).items()
        if k.split("|")[1] not in open_ids
        and isinstance(v, dict)
        and now_ms - int(v.get("at", 0)) > KEEP_MS
    ]
    if old:
        store.forget(old)
    return len(old)
