"""What a webhook receives: the record (or notice) as it is (``json``), or one readable line for a
person in a Slack incoming-webhook message or a Microsoft Teams (Workflows) Adaptive Card.

The line is built from named fields (``template.FIELDS``, documented in docs/policy.md), all
computed from the record or notice itself, so a message delivered again later reads the same.
Every line names its event first (type, short EventId, VM, service: three overlapping reboots of
one VM read apart), and reads aloud: what the policy will do is said when an event is announced
or rescheduled ("would" in a dry run); what it did, from the record's ``Acted``, when it ends,
with how long the impact lasted instead of a countdown; what it could not do comes as a notice
of its own; a ``Started`` line says what Azure did and who let it start (``ApprovedBy``).

Users shape the message with templates (``template.py``), per message kind or one for all; the
result is encoded here, so no value can break the message's structure: JSON-escaped for ``json``
(whose template is a JSON document), ``&``, ``<`` and ``>`` escaped for Slack (a Description
holding ``<!channel>`` must not ping anyone), Markdown escaped for Teams (a Description's
``**bold**`` or link is shown as written, not rendered). The templates' own text is kept, so it
may use the receiver's markup.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from string import Template
from typing import Any

from ... import notices
from ...model import ApprovedBy, Phase
from ...policy.match import Facts, Policy
from ...policy.words import decision
from ...timefmt import parse_iso_ms

ADAPTIVE_CARD = "application/vnd.microsoft.card.adaptive"
MAX_VALUE_CHARS = 500  # one field, in a message
MAX_TEXT_CHARS = 3000  # the whole message text
SERVICE_TAG = "service"  # the tag naming a VM's service (the fleet view's ServiceTag default)
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]+")
# What Teams' Markdown (CommonMark's) could read as markup: emphasis, code, links and autolinks,
# headings, quotes, tables, strike-through; and a list marker where a value starts.
_MARKDOWN = re.compile(r"([\\`*_\[\]<>#|~])")
_BULLET = re.compile(r"^(\s*)([-+])(?=\s)")
_ORDERED = re.compile(r"^(\s*\d+)([.)])(?=\s)")
_RULE = re.compile(r"^rule (\d+)\b")
_STARTED_BY: dict[str, str] = {  # by ApprovedBy (a StrEnum: its values are the keys)
    ApprovedBy.THIS_VM: "approved by this VM",
    ApprovedBy.AZURE_POLICY: "approved by Azure's own policy (automaticallyApprove), not by us",
    ApprovedBy.ELSEWHERE: "approved elsewhere, not by this VM (another VM, an acknowledgement "
    "from outside the VM, or the platform's allInstancesDown)",
    ApprovedBy.NO_NOTICE: "without notice (a failure, or the platform started it)",
    ApprovedBy.AT_NOT_BEFORE: "at NotBefore (nobody approved it early)",
    ApprovedBy.COLLECTOR: "approved by the collector (Azure's acknowledge API, preview)",
}


def _dur(seconds: float) -> str:
    s = abs(round(seconds))
    return (
        f"{s // 3600}h{s % 3600 // 60:02d}m"
        if s >= 3600
        else f"{s // 60}m{s % 60:02d}s"
        if s >= 60
        else f"{s}s"
    )


def _spoken(iso: str) -> str:
    """``2026-01-01T00:14:30.000Z`` as ``2026-01-01 00:14:30 UTC``."""
    return f"{iso[:10]} {iso[11:19]} UTC" if len(iso) >= 19 and iso[10] == "T" else iso


def _when(r: Mapping[str, Any]) -> str:
    if r.get("Phase") == Phase.STARTED and "Notice" not in r:
        return ""  # started: What says when, against NotBefore
    if r.get("Phase") == Phase.REMOVED and "Notice" not in r:
        took = r.get("SinceStartedSeconds")
        if isinstance(took, (int, float)):
            return f"took {_dur(took)} from its start"
        return "never seen started"
    nb = r.get("NotBefore")
    if not nb:
        return "no NotBefore"
    try:
        left = (parse_iso_ms(nb) - parse_iso_ms(r["TimeGenerated"])) / 1000
    except (KeyError, TypeError, ValueError):
        return f"not before {nb}"
    rel = f"in {_dur(left)}" if left >= 0 else f"{_dur(left)} ago"
    return f"not before {_spoken(nb)}, {rel}"


def _impact(r: Mapping[str, Any]) -> str:
    d = r.get("DurationInSeconds")
    if not isinstance(d, (int, float)) or d < 0:
        return "expected impact: unknown"
    return "no expected impact" if d == 0 else f"expected impact {_dur(d)}"


def _service(r: Mapping[str, Any]) -> str:
    """The VM's service as the fleet view reads it: its ``service`` tag, else its Kubernetes
    node pool (``<cluster>/<pool>``), else its scale set, else its resource group
    (dashboards/definitions/fleet-vms.kql)."""
    found = r.get("Tags")
    tags = found if isinstance(found, dict) else {}
    tagged = next((v for k, v in tags.items() if str(k).lower() == SERVICE_TAG), None)
    pool = f"{r['Cluster']}/{r['NodePool']}" if r.get("NodePool") and r.get("Cluster") else None
    return str(tagged or pool or r.get("ScaleSetName") or r.get("ResourceGroup") or "")


def _what(r: Mapping[str, Any]) -> str:
    kind = r.get("Notice")
    if kind == notices.HOOK_FAILED:
        which = "hook after it" if r.get("HookPhase") == "post" else "hook"
        return f"{which} {r.get('Hook')} {r.get('Reason')}"
    if kind == notices.APPROVAL_GIVEN_UP:
        return f"approval given up ({r.get('Reason')})"
    if kind == notices.STARTED_BEFORE_HOOKS:
        return f"started while {r.get('Reason')}"
    phase = r.get("Phase")
    if phase == Phase.STARTED:
        delay = r.get("StartDelaySeconds")
        when = (
            "started"
            if not isinstance(delay, (int, float))
            else f"started {_dur(delay)} {'early' if delay < 0 else 'after NotBefore'}"
        )
        by = _STARTED_BY.get(str(r.get("ApprovedBy")))
        return f"{when}, {by}" if by else when
    if phase == Phase.REMOVED:
        return f"ended ({r.get('Outcome') or 'Unknown'})"
    said: dict[str, str] = {
        Phase.FIRST_SEEN: "announced",
        Phase.UPDATED: "rescheduled",
        Phase.APPROVED: "approved by this VM (it may start early)",
    }
    return said.get(str(phase), str(phase))


def _facts(r: Mapping[str, Any]) -> Facts:
    return Facts(
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


def _ended(r: Mapping[str, Any], policy: Policy) -> str:
    """What the policy did for an event that has ended, and the hooks it runs now: by the
    event's rule (``Acted`` names it), only if a hook before it ran (docs/policy.md)."""
    acted = str(r.get("Acted") or "")
    found = _RULE.match(acted)
    d = policy.decide_facts(_facts(r), int(found.group(1)) if found else None)
    if not d.post_hooks:
        return acted or "nothing to do"
    ran = any(re.search(rf"(: |, ){re.escape(h)} ", acted) for h in d.pre_hooks)
    will = "would run" if policy.dry_run else "runs"
    alone = not d.pre_hooks or (d.rule is not None and d.rule.post_hooks_alone)
    now = (
        f"{', then '.join(d.post_hooks)} {will} now it has ended"
        if alone or ran
        else f"{', '.join(d.post_hooks)} not run: no hook before it ran"
    )
    return f"{acted}; {now}" if acted else f"{now} ({d.label})"


def _policy(r: Mapping[str, Any], policy: Policy | None) -> str:
    """What the policy does about this record, or what a notice's failure means."""
    if "Notice" in r:
        return str(r.get("Consequence") or "")
    phase = r.get("Phase")
    if phase == Phase.APPROVED:
        return str(r.get("Acted") or "approved")
    if phase == Phase.STARTED:
        return ""  # what happened is Azure's: the hooks' own outcomes come as notices
    if policy is None:
        return "observe only"
    if phase == Phase.REMOVED:
        return _ended(r, policy)
    return decision(policy.decide_facts(_facts(r)), policy.dry_run)


def _clean(value: Any) -> str:
    text = "" if value is None else str(value)
    return _CONTROL.sub(" ", text).strip()[:MAX_VALUE_CHARS]


def fields(r: Mapping[str, Any], policy: Policy | None) -> dict[str, str]:
    """The documented fields (``template.FIELDS``) of one record or notice, each one line."""
    resources = [str(x) for x in r.get("Resources") or ()]
    vm = r.get("VmName") or r.get("Computer") or "unknown VM"
    service = _service(r)
    short = str(r.get("EventId") or "")[:8]
    out = {
        "Event": f"{r.get('EventType')} {short} on {vm}"
        + (f" (service {service})" if service else ""),
        "VmName": vm,
        "Service": service,
        "EventId": r.get("EventId"),
        "ShortId": short,
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
        "ApprovedBy": r.get("ApprovedBy"),
        "Description": r.get("Description"),
        "Resources": ", ".join(resources),
    }
    return {k: _clean(v) for k, v in out.items()}


def line(f: Mapping[str, str]) -> str:
    """``Reboot 4f2a9c1e on vm-1 (service web): announced · Scheduled · from User · ...``"""
    record = f["Phase"] not in notices.KINDS
    parts = [f"{f['Event']}: {f['What']}"]
    if f["Phase"] != Phase.REMOVED or not record:
        parts.append(f["EventStatus"])
    if record:
        parts.append(f"from {f['EventSource']}")
    parts += [f["Whose"], *([f["When"]] if f["When"] else [])]
    if record and f["Phase"] != Phase.REMOVED:
        parts.append(f["Impact"])
    if f["Policy"]:
        parts.append(f"policy: {f['Policy']}")
    return " · ".join(parts)


def slack_escape(value: str) -> str:
    return value.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def markdown_escape(value: str) -> str:
    """A value shown as written in Teams' Markdown: every character it could read as markup
    (emphasis, links, code, headings, lists, tables) escaped with a backslash."""
    escaped = _BULLET.sub(r"\1\\\2", _MARKDOWN.sub(r"\\\1", value))
    return _ORDERED.sub(r"\1\\\2", escaped)


def json_escape(value: str) -> str:
    """A value inside a JSON string of the user's template (the quotes are the template's)."""
    return json.dumps(value, ensure_ascii=False)[1:-1]


ESCAPES = {"json": json_escape, "slack": slack_escape, "teams": markdown_escape}


def text(
    r: Mapping[str, Any],
    policy: Policy | None,
    shape: Template | None = None,
    *,
    fmt: str = "",
) -> str:
    """The message text: the user's template over the fields (their values escaped for
    ``fmt``), or the default line (escaped, too)."""
    f = fields(r, policy)
    escape = ESCAPES.get(fmt)
    if escape is not None:
        f = {k: escape(v) for k, v in f.items()}
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
        if shape is None:
            return payload.encode("utf-8")
        f = fields(record, policy)
        f["Text"] = line(f)
        return shape.substitute({k: json_escape(v) for k, v in f.items()}).encode("utf-8")
    words = text(record, policy, shape, fmt=fmt)
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
