"""``[sinks.webhook] template`` and ``templates``: the message, shaped by the user.

A ``string.Template`` over named fields (``$VmName``, ``${What}``; ``$$`` for a dollar), the
fields every message has (``FIELDS``, documented in docs/policy.md). It is substitution only: no
expression, attribute, index or call is ever evaluated (unlike a format string or a template
language), and an unknown field or a stray ``$`` is refused when the config is loaded, so what
``check-config`` accepts renders every record. For ``format = "json"`` the template is a JSON
document whose strings hold the fields (each value JSON-escaped when it is put in): it is refused
unless it renders as JSON. ``templates`` gives one per message kind (a Phase or a notice), the
others taking ``template`` or the default. Light on purpose: the config imports it.
"""

from __future__ import annotations

import json
from string import Template

from ...model import Phase
from ...notices import KINDS as NOTICE_KINDS

FIELDS = {
    "Event": 'the event, named: "Reboot 4f2a9c1e on vm-1 (service web)"',
    "VmName": "this VM's name (or the host name while the instance document is unknown)",
    "Service": "the VM's service: its tag service, else its scale set, else its resource group",
    "EventId": "the EventId",
    "ShortId": "the EventId's first 8 characters",
    "EventType": "Freeze, Reboot, Redeploy, Preempt, Terminate",
    "EventStatus": "Scheduled or Started",
    "EventSource": 'Platform or User ("source unknown" on old api-versions)',
    "Phase": "the record's Phase (FirstSeen, Updated, Started, Removed, Approved) or the "
    "notice (HookFailed, ApprovalGivenUp, StartedBeforeHooks)",
    "What": 'what happened, in words: "announced", "started 10m00s early, approved by this '
    'VM", "hook drain failed (exit 3)", "approval given up (NotBefore has passed)"...',
    "Whose": '"this VM" or "other VMs: <names>"',
    "When": '"not before <time>, in 14m30s", "not before <time>, 2m00s ago", "no NotBefore"; '
    'on Removed how long it took: "took 3m10s from its start", "never seen started"',
    "NotBefore": "NotBefore as ISO 8601 UTC, or empty",
    "Impact": '"expected impact 5s", "no expected impact" or "expected impact: unknown"',
    "Policy": 'what the policy will do (FirstSeen, Updated: "would" in a dry run), what it did '
    "(Approved, Removed: the record's Acted, and the hooks after it), or what a notice's "
    "failure means; empty on Started",
    "ApprovedBy": "who let it start (ThisVm, AzurePolicy, Elsewhere, NoNotice, AtNotBefore), "
    "on Started and Removed",
    "Description": "the event's Description, on one line",
    "Resources": "the VM names it names, comma-separated",
    "Text": "the default line: all of the above, as without a template",
}
KINDS = (*(str(p) for p in Phase), *NOTICE_KINDS)  # what ``templates`` may be keyed by


def template(text: str, fmt: str = "") -> Template:
    """A user's template, or ValueError naming what is wrong (an unknown field, a lone ``$``,
    for ``json`` a document that is not JSON)."""
    t = Template(text)
    if not t.is_valid():
        raise ValueError("template: a '$' must start a field ($Name or ${Name}) or be written $$")
    unknown = sorted(set(t.get_identifiers()) - set(FIELDS))
    if unknown:
        raise ValueError(
            f"template: unknown field(s) {', '.join(unknown)} (known: {', '.join(FIELDS)})"
        )
    if fmt == "json":
        value = json.dumps('a "quoted" \\ value')[1:-1]  # as a field is put in: JSON-escaped
        sample = t.substitute(dict.fromkeys(FIELDS, value))
        try:
            json.loads(sample)
        except json.JSONDecodeError as exc:
            raise ValueError(
                "template: with format json it must be a JSON document, each field inside "
                f'a string ("$EventId"): {exc.msg} at character {exc.pos}'
            ) from None
    return t


def templates(by_kind: dict[str, str], fmt: str = "") -> dict[str, Template]:
    """``templates``: one per message kind, each checked as ``template`` is."""
    unknown = sorted(set(by_kind) - set(KINDS))
    if unknown:
        raise ValueError(
            f"templates: unknown message kind(s) {', '.join(unknown)} (known: {', '.join(KINDS)})"
        )
    return {kind: template(text, fmt) for kind, text in by_kind.items() if text}
