"""``[sinks.webhook] template``: the message text, shaped by the user.

A ``string.Template`` over named fields (``$VmName``, ``${What}``; ``$$`` for a dollar), the
fields every message has (``FIELDS``, documented in docs/policy.md). It is substitution only: no
expression, attribute, index or call is ever evaluated (unlike a format string or a template
language), and an unknown field or a stray ``$`` is refused when the config is loaded, so what
``check-config`` accepts renders every record. Light on purpose: the config imports it.
"""

from __future__ import annotations

from string import Template

FIELDS = {
    "VmName": "this VM's name (or the host name while the instance document is unknown)",
    "EventId": "the EventId",
    "EventType": "Freeze, Reboot, Redeploy, Preempt, Terminate",
    "EventStatus": "Scheduled or Started",
    "EventSource": 'Platform or User ("source unknown" on old api-versions)',
    "Phase": "the record's Phase (FirstSeen, Updated, Started, Removed, Approved) or the "
    "notice (HookFailed, ApprovalGivenUp, StartedBeforeHooks)",
    "What": 'what happened, in words: "announced", "started 10m00s early", "hook drain '
    'failed (exit 3)", "approval given up (NotBefore has passed)"...',
    "Whose": '"this VM" or "other VMs: <names>"',
    "When": '"NotBefore in 14m30s (<time>)", "NotBefore 2m00s ago (<time>)" or "no NotBefore"',
    "NotBefore": "NotBefore as ISO 8601 UTC, or empty",
    "Impact": '"expected impact 5s", "no expected impact" or "expected impact: unknown"',
    "Policy": 'what the policy does (FirstSeen, Updated, Removed: "would" in a dry run), '
    '"approved", or what a notice\'s failure means; empty on Started',
    "Description": "the event's Description, on one line",
    "Resources": "the VM names it names, comma-separated",
    "Text": "the default line: all of the above, as without a template",
}


def template(text: str) -> Template:
    """A user's template, or ValueError naming what is wrong (an unknown field, a lone ``$``)."""
    t = Template(text)
    if not t.is_valid():
        raise ValueError("template: a '$' must start a field ($Name or ${Name}) or be written $$")
    unknown = sorted(set(t.get_identifiers()) - set(FIELDS))
    if unknown:
        raise ValueError(
            f"template: unknown field(s) {', '.join(unknown)} (known: {', '.join(FIELDS)})"
        )
    return t
