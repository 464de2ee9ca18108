"""The VM's tags the operator chose (``agent.tags``), read from the instance document: which
service a VM belongs to, for the fleet view's service views (docs/record-contract.md §7).

Only the chosen names are ever read, so a tag nobody chose (a cost centre, an owner's address)
never leaves the VM. Names match as Azure matches them, ignoring case; the column is keyed by
the name as the operator wrote it. Each value is checked on its own: a value that is not text is
left out, text is cleaned (lone surrogates become U+FFFD) and cut to Azure's own limit, and the
whole column is capped; whatever had to be cut or left out is counted and said once.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

MAX_NAMES = 10  # tags an operator may choose (a column on every record: keep it small)
MAX_NAME_CHARS = 512  # Azure's limit on a tag name
MAX_VALUE_CHARS = 256  # Azure's limit on a tag value: a longer one did not come from Azure
MAX_TAGS_BYTES = 1024  # the Tags column's JSON, whatever was chosen
_SURROGATE = re.compile("[\ud800-\udfff]")
_FORBIDDEN = re.compile(r"[<>%&\\?/\x00-\x1f]")  # not allowed in an Azure tag name


@dataclass(frozen=True, slots=True)
class ChosenTags:
    """What was read: the column's value and the problems met (one line each)."""

    values: dict[str, str] | None  # None: no tag chosen (the column stays empty)
    problems: tuple[str, ...] = field(default=())


def check_name(name: str) -> str:
    """A configured tag name, as ``config`` validates it (raises ValueError naming the fault)."""
    if not name or name != name.strip():
        raise ValueError(f"tag name {name!r}: empty or with leading/trailing spaces")
    if len(name) > MAX_NAME_CHARS:
        raise ValueError(f"tag name {name[:20]!r}...: longer than {MAX_NAME_CHARS} characters")
    if _FORBIDDEN.search(name):
        raise ValueError(
            f"tag name {name!r}: Azure tag names cannot hold < > % & \\ ? / or control characters"
        )
    return name


def check_names(names: Sequence[str]) -> list[str]:
    out = [check_name(n) for n in names]
    if len(out) > MAX_NAMES:
        raise ValueError(f"at most {MAX_NAMES} tags (got {len(out)})")
    lowered = [n.lower() for n in out]
    repeated = sorted({n for n in lowered if lowered.count(n) > 1})
    if repeated:
        raise ValueError(f"tag names repeated (Azure tag names ignore case): {', '.join(repeated)}")
    return out


def served_tags(compute: dict[str, Any]) -> list[tuple[Any, Any]]:
    """(name, value) pairs as served: ``tagsList`` (api-version 2019-06-04 on), else the older
    ``tags`` string (``name:value;name2:value2``)."""
    listed = compute.get("tagsList")
    if isinstance(listed, list):
        return [(t.get("name"), t.get("value")) for t in listed if isinstance(t, dict)]
    text = compute.get("tags")
    if isinstance(text, str) and text:
        return [(n, v) for n, _, v in (p.partition(":") for p in text.split(";") if p)]
    return []


def choose(compute: dict[str, Any], chosen: Sequence[str]) -> ChosenTags:
    """The chosen tags of the instance document's ``compute`` section."""
    if not chosen:
        return ChosenTags(None)
    by_lower: dict[str, Any] = {}
    for name, value in served_tags(compute):
        if isinstance(name, str):
            by_lower.setdefault(name.lower(), value)
    values: dict[str, str] = {}
    problems: list[str] = []
    for name in chosen:
        if name.lower() not in by_lower:
            continue
        value = by_lower[name.lower()]
        if not isinstance(value, str):
            problems.append(f"tag {name}: value is not text ({type(value).__name__}); left out")
            continue
        value = _SURROGATE.sub("\ufffd", value)
        if len(value) > MAX_VALUE_CHARS:
            problems.append(
                f"tag {name}: value cut to {MAX_VALUE_CHARS} characters (was {len(value)})"
            )
            value = value[:MAX_VALUE_CHARS]
        if _size({**values, name: value}) > MAX_TAGS_BYTES:
            problems.append(f"tag {name}: left out, the tags would exceed {MAX_TAGS_BYTES} bytes")
            continue
        values[name] = value
    return ChosenTags(values, tuple(problems))


def _size(values: dict[str, str]) -> int:
    return len(json.dumps(values, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))
