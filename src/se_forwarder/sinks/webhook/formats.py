"""What a webhook receives: the record as it is (``json``), or one readable line for a person in
a Slack incoming-webhook message or a Microsoft Teams (Workflows) Adaptive Card message.

The line says which VM, the event type and status, the time until NotBefore, the expected
duration, and what the policy does about it, all computed from the record itself (so a record
redelivered later reads the same).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ...model import Phase
from ...policy.match import Facts, Policy
from ...policy.words import decision
from ...timefmt import parse_iso_ms

ADAPTIVE_CARD = "application/vnd.microsoft.card.adaptive"


def _dur(seconds: float) -> str:
    s = abs(round(seconds))
    text = f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else \
        f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s"
    return text


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


def _duration(r: Mapping[str, Any]) -> str:
    d = r.get("DurationInSeconds")
    if d is None or d < 0:
        return "expected impact: unknown"
    return "no expected impact" if d == 0 else f"expected impact {_dur(d)}"


def _what(r: Mapping[str, Any]) -> str:
    phase = r.get("Phase")
    if phase == Phase.STARTED:
        delay = r.get("StartDelaySeconds")
        if delay is None:
            return "started"
        return f"started {_dur(delay)} {'early' if delay < 0 else 'after NotBefore'}"
    if phase == Phase.REMOVED:
        return f"ended ({r.get('Outcome') or 'Unknown'})"
    return {Phase.FIRST_SEEN: "announced", Phase.UPDATED: "rescheduled",
            Phase.APPROVED: "approved by this VM (it may start early)"}.get(str(phase), str(phase))


def _policy(r: Mapping[str, Any], policy: Policy | None) -> str:
    if r.get("Phase") == Phase.APPROVED:
        return "approved"
    if policy is None:
        return "observe only"
    facts = Facts(str(r.get("EventId")), str(r.get("EventType")), r.get("EventSource"),
                  str(r.get("EventStatus")), r.get("DurationInSeconds"),
                  tuple(r.get("Resources") or ()), r.get("AffectsThisVm"), r.get("VmName"),
                  r.get("NotBefore"))
    d = policy.decide_facts(facts)
    if r.get("Phase") == Phase.REMOVED:
        return f"after it: {', '.join(d.post_hooks)}" if d.post_hooks else "nothing after it"
    return decision(d, policy.dry_run)


def line(r: Mapping[str, Any], policy: Policy | None) -> str:
    """``vm-1: Reboot announced · Scheduled · User · NotBefore in 14m55s (...) · ...``"""
    vm = r.get("VmName") or r.get("Computer") or "unknown VM"
    whose = "this VM" if r.get("AffectsThisVm") else \
        "other VMs: " + ", ".join(r.get("Resources") or ())
    parts = [f"{vm}: {r.get('EventType')} {_what(r)}", str(r.get("EventStatus")),
             r.get("EventSource") or "source unknown", whose, _when(r), _duration(r),
             f"policy: {_policy(r, policy)}"]
    return " · ".join(parts)


def body(fmt: str, payload: str, record: Mapping[str, Any], policy: Policy | None) -> bytes:
    if fmt == "json":
        return payload.encode("utf-8")
    text = line(record, policy)
    if fmt == "slack":
        return json.dumps({"text": text}, ensure_ascii=False).encode("utf-8")
    card = {"$schema": "http://adaptivecards.io/schemas/adaptive-card.json",
            "type": "AdaptiveCard", "version": "1.4",
            "body": [{"type": "TextBlock", "text": text, "wrap": True}]}
    return json.dumps({"type": "message", "attachments": [
        {"contentType": ADAPTIVE_CARD, "contentUrl": None, "content": card}]},
        ensure_ascii=False).encode("utf-8")
