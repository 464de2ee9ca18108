"""What a hook is told: the event as environment variables, the record as JSON on stdin.

Variables (all strings; empty when unknown):

==============================  =============================================================
``SE_EVENT_ID``                 the EventId
``SE_EVENT_TYPE``               Freeze, Reboot, Redeploy, Preempt, Terminate
``SE_EVENT_STATUS``             Scheduled or Started
``SE_EVENT_SOURCE``             Platform or User
``SE_NOT_BEFORE``               ISO 8601 UTC (empty once started)
``SE_SECONDS_UNTIL_NOT_BEFORE`` whole seconds from the hook's start to NotBefore (may be < 0)
``SE_DURATION_SECONDS``         DurationInSeconds (-1: unknown)
``SE_RESOURCES``                the VM names, comma-separated
``SE_DESCRIPTION``              as served, cut at 4,096 characters (the whole text is on stdin)
``SE_HOOK``                     this hook's name
``SE_HOOK_PHASE``               ``pre`` (before the impact) or ``post`` (after it)
``SE_RECORD_PHASE``             the record that triggered it: FirstSeen, Updated, Removed
``SE_OUTCOME``                  on ``post``: Completed, Cancelled or Unknown
``SE_VM_NAME``                  this VM's name
``SE_AFFECTS_THIS_VM``          ``true`` or ``false``
``SE_DRY_RUN``                  ``false`` (hooks never run in a dry run)
==============================  =============================================================

Every value is one line of text: an event's values come from IMDS's JSON, where a NUL (which no
environment can carry) or a line break (which would split the value for a line-based consumer:
a header, a ``KEY=value`` file, ``read``) are valid escapes. A line break (CR, LF, CRLF, VT, FF,
NEL, U+2028/U+2029) becomes a space; any other control character, NUL included, becomes U+FFFD.
The record on stdin keeps the text exactly as served (JSON escapes it).

Besides these, a hook sees only a few of the agent's variables (``PATH``, ``LANG``, ``HOME``…,
see ``oshost.process``) and its own ``env`` table.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from ..model import LifecycleRecord
from ..oshost import process
from ..timefmt import parse_iso_ms

MAX_VALUE_CHARS = 4096  # one variable may not exceed 128 KB on Linux (E2BIG): never fail for text
_LINE_BREAK = re.compile("\r\n|[\n\r\x0b\x0c\x85\u2028\u2029]")
_CONTROL = re.compile("[\x00-\x08\x0e-\x1f\x7f-\x84\x86-\x9f]")


def _text(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def safe_for_environment(value: str) -> str:
    """``value`` safe for an environment and a line-based reader (see the module's docstring)."""
    return _CONTROL.sub("\ufffd", _LINE_BREAK.sub(" ", value))


def unsafe_characters(values: Mapping[str, str]) -> int:
    """How many characters ``safe_for_environment`` replaces in ``values`` (logged when a hook
    starts)."""
    return sum(len(_LINE_BREAK.findall(v)) + len(_CONTROL.findall(v)) for v in values.values())


def variables(
    record: LifecycleRecord, *, hook: str, hook_phase: str, now_ms: int
) -> dict[str, str]:
    return {
        k: safe_for_environment(v)
        for k, v in raw_variables(record, hook=hook, hook_phase=hook_phase, now_ms=now_ms).items()
    }


def raw_variables(
    record: LifecycleRecord, *, hook: str, hook_phase: str, now_ms: int
) -> dict[str, str]:
    """The event's variables as served, before ``safe_for_environment``."""
    until = ""
    if record.NotBefore:
        until = str((parse_iso_ms(record.NotBefore) - now_ms) // 1000)
    return {
        "SE_EVENT_ID": record.EventId,
        "SE_EVENT_TYPE": record.EventType,
        "SE_EVENT_STATUS": record.EventStatus,
        "SE_EVENT_SOURCE": _text(record.EventSource),
        "SE_NOT_BEFORE": _text(record.NotBefore),
        "SE_SECONDS_UNTIL_NOT_BEFORE": until,
        "SE_DURATION_SECONDS": _text(record.DurationInSeconds),
        "SE_RESOURCES": ",".join(record.Resources),
        "SE_DESCRIPTION": _text(record.Description)[:MAX_VALUE_CHARS],
        "SE_HOOK": hook,
        "SE_HOOK_PHASE": hook_phase,
        "SE_RECORD_PHASE": record.Phase,
        "SE_OUTCOME": _text(record.Outcome),
        "SE_VM_NAME": _text(record.VmName),
        "SE_AFFECTS_THIS_VM": _text(record.AffectsThisVm),
        "SE_DRY_RUN": "false",
    }


def environment(
    record: LifecycleRecord,
    *,
    hook: str,
    hook_phase: str,
    now_ms: int,
    extra: Mapping[str, str],
    environ: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The whole environment of one hook run: the allowed agent variables, the hook's own
    ``env``, then the event (which wins: a hook always sees the true event)."""
    return {
        **process.base_environment(environ),
        **extra,
        **variables(record, hook=hook, hook_phase=hook_phase, now_ms=now_ms),
    }
