"""What a webhook receives: the record (or notice) as it is (``json``), or one readable line for a
person in a Slack incoming-webhook message or a Microsoft Teams (Workflows) Adaptive Card.

The line is built from named fields (``FIELDS``, documented in docs/policy.md), all computed
from the record or notice itself, so a message delivered again later reads the same, and so the
words follow the recorded facts: what the policy will do is said when an event is announced or
rescheduled (with "would" in a dry run); what it could not do comes as a notice of its own (a
hook that failed, an approval given up, an event that started before its hooks finished); a
``Started`` line says only what Azure did.

Users shape the line with ``template`` (``template.py``); the result is JSON-encoded here, so no
value can break the message's structure. For Slack, values have ``&``, ``<`` and ``>`` escaped
(a Description holding ``<!channel>`` must not ping anyone); the template's own text is kept, so
it may use Slack's markup.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from string import Template
from typing import Any

from ... import notices
from ...model import Phase
from ...policy.match import Facts, Policy
from ...policy.words import decision
from ...timefmt import parse_iso_ms

ADAPTIVE_CARD = "application/vnd.microsoft.card.adaptive"
MAX_VALUE_CHARS = 500  # one field, in a message
MAX_TEXT_CHARS = 3000  # the whole message text
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]+")


def _dur(seconds: float) -> str:
    s = abs(round(seconds))
    return (
        f"{s // 3600}h{s % 3600 // 60:02d}m"
        if s >= 3600
        else f"{s // 60}m{s % 60:02d}s"
        if s >= 60
        else f"{s}s"
    )


def _when(r: Mapping[str, Any]) -> str:
    nb = r.get("NotBefore")
    if not nb:
        return "no NotBefore"
    try:
        left = (parse_iso_ms(nb) - parse_iso_ms(r["TimeGenerated"])) / 1000
    except (KeyError, TypeError, ValueError):
        return f"NotBefore {nb}"
    rel = f"in {_dur(left)}" if left >= 0 else f"{_dur(left)} ago"
    return f"NotBefore {rel} ({nb})"


def _impact(r: Mapping[str, Any]) -> str:
    d = r.get("DurationInSeconds")
    if not isinstance(d, (int, float)) or d < 0:
        return "expected impact: unknown"
    return "no expected impact" if d == 0 else f"expected impact {_dur(d)}"


def _what(r: Mapping[str, Any]) -> str:
    kind = r.get("Notice")
    if kind == notices.HOOK_FAILED:
        which = "after-hook" if r.get("HookPhase") == "post" else "hook"
        return f"{which} {r.get('Hook')} {r.get('Reason')}"
    if kind == notices.APPROVAL_GIVEN_UP:
        return f"approval given up ({r.get('Reason')})"
    if kind == notices.STARTED_BEFORE_HOOKS:
        return f"started while {r.get('Reason')}"
    phase = r.get("Phase")
    if phase == Phase.STARTED:
        delay = r.get("StartDelaySeconds")
        if not isinstance(delay, (int, float)):
            return "started"
        return f"started {_dur(delay)} {'early' if delay < 0 else 'after NotBefore'}"
    if phase == Phase.REMOVED:
        return f"ended ({r.get('Outcome') or 'Unknown'})"
    said: dict[str, str] = {
        Phase.FIRST_SEEN: "announced",
        Phase.UPDATED: "rescheduled",
        Phase.APPROVED: "approved by this VM (it may start early)",
    }
    return said.get(str(phase), str(phase))


def _policy(r: Mapping[str, Any], policy: Policy | None) -> str:
    """What the policy does about this record, or what a notice's failure means."""
    if "Notice" in r:
        return str(r.get("Consequence") or "")
    phase = r.get("Phase")
    if phase == Phase.APPROVED:
        return "approved"
    if phase == Phase.STARTED:
        return ""  # what happened is Azure's: the hooks' own outcomes come as notices
    if policy is None:
        return "observe only"
    facts = Facts(
        str(r.get("EventId")),
        str(r.get("EventType")),
        r.get("EventSource"),
        str(r.get("EventStatus")),
        r.get("DurationInSeconds"),
        tuple(r.get("Resources") or ()),
        r.get("AffectsThisVm"),
        r.get("VmName"),
        r.get("NotBefore"),
    )
    d = policy.decide_facts(facts)
    if phase == Phase.REMOVED:
        if not d.post_hooks:
            return "nothing after it"
        run = "would run" if policy.dry_run else "run"
        return f"after it: {run} {', '.join(d.post_hooks)}" + (
            " (dry run)" if policy.dry_run else ""
        )
    return decision(d, policy.dry_run)


def _clean(value: Any) -> str:
    text = "" if value is None else str(value)
    return _CONTROL.sub(" ", text).strip()[:MAX_VALUE_CHARS]


def fields(r: Mapping[str, Any], policy: Policy | None) -> dict[str, str]:
    """The documented fields (``FIELDS``) of one record or notice, each one line."""
    resources = [str(x) for x in r.get("Resources") or ()]
    out = {
        "VmName": r.get("VmName") or r.get("Computer") or "unknown VM",
        "EventId": r.get("EventId"),
        "EventType": r.get("EventType"),
        "EventStatus": r.get("EventStatus"),
        "EventSource": r.get("EventSource") or "source unknown",
        "Phase": r.get("Notice") or r.get("Phase"),
        "What": _what(r),
        "Whose": "this VM" if r.get("AffectsThisVm") else "other VMs: " + ", ".join(resources),
        "When": _when(r),
        "NotBefore": r.get("NotBefore"),
        "Impact": _impact(r),
        "Policy": _policy(r, policy),
        "Description": r.get("Description"),
        "Resources": ", ".join(resources),
    }
    return {k: _clean(v) for k, v in out.items()}


def line(f: Mapping[str, str]) -> str:
    """``vm-1: Reboot announced · Scheduled · User · this VM · NotBefore in 14m55s (...) · ...``"""
    parts = [f"{f['VmName']}: {f['EventType']} {f['What']}", f["EventStatus"]]
    if f["Phase"] not in notices.KINDS:
        parts.append(f["EventSource"])
    parts += [f["Whose"], f["When"]]
    if f["Phase"] not in notices.KINDS:
        parts.append(f["Impact"])
    if f["Policy"]:
        parts.append(f"policy: {f['Policy']}")
    return " · ".join(parts)


def _slack_escape(value: str) -> str:
    return value.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def text(
    r: Mapping[str, Any],
    policy: Policy | None,
    shape: Template | None = None,
    *,
    slack: bool = False,
) -> str:
    """The message text: the user's template over the fields, or the default line."""
    f = fields(r, policy)
    if slack:
        f = {k: _slack_escape(v) for k, v in f.items()}
    f["Text"] = line(f)
    return (shape.substitute(f) if shape is not None else f["Text"])[:MAX_TEXT_CHARS]


def body(
    fmt: str,
    payload: str,
    record: Mapping[str, Any],
    policy: Policy | None,
    shape: Template | None = None,
) -> bytes:
    if fmt == "json":
        return payload.encode("utf-8")
    words = text(record, policy, shape, slack=fmt == "slack")
    if fmt == "slack":
        return json.dumps({"text": words}, ensure_ascii=False).encode("utf-8")
    card = {
        "$schema": "http://adaptivecards.io/schemas/adaptive-card.json",
        "type": "AdaptiveCard",
        "version": "1.4",
        "body": [{"type": "TextBlock", "text": words, "wrap": True}],
    }
    return json.dumps(
        {
            "type": "message",
            "attachments": [{"contentType": ADAPTIVE_CARD, "contentUrl": None, "content": card}],
        },
        ensure_ascii=False,
    ).encode("utf-8")
