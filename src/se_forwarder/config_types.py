"""Value types the configuration models share (pydantic at the edge, one definition each)."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, BeforeValidator, PlainValidator

from .model import EVENT_SOURCES, EVENT_STATUSES, EVENT_TYPES, PHASES


def _empty_is_none(value: Any) -> Any:
    return None if value == "" else value


# A path that may be left out, or given as "" (what an environment override can only say).
OptionalPath = Annotated[Path | None, BeforeValidator(_empty_is_none)]


def known_values(values: list[str], known: tuple[str, ...], what: str) -> list[str]:
    """Case-insensitive, written back as Azure spells them; a typo is an error, not a rule that
    silently never matches."""
    by_lower = {k.lower(): k for k in known}
    out = []
    for v in values:
        if v.lower() not in by_lower:
            raise ValueError(f"unknown {what} {v!r} (one of {', '.join(known)})")
        out.append(by_lower[v.lower()])
    return out


def _known(known: tuple[str, ...], what: str) -> Any:
    return Annotated[list[str], AfterValidator(lambda v: known_values(v, known, what))]


EventTypes = _known(EVENT_TYPES, "EventType")
EventSources = _known(EVENT_SOURCES, "EventSource")
EventStatuses = _known(EVENT_STATUSES, "EventStatus")
Phases = _known(PHASES, "phase")


_VARIABLE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def variable_name(value: str, setting: str, what: str) -> str:
    """``value`` if it can be the name of an environment variable; otherwise a ValueError that
    never quotes it (a ``*_env`` setting that does not hold a name usually holds the secret)."""
    if not _VARIABLE.match(value):
        raise ValueError(
            f"{setting} must name an environment variable (letters, digits and _) "
            f"that holds {what}, not hold it itself"
        )
    return value


def section_of(model: Callable[[], type[BaseModel]]) -> Any:
    """An optional table of a feature most VMs leave off (``[policy]``, ``[kubernetes]``, a sink),
    validated by the model ``model()`` returns, which imports it only when the table is present:
    absent, it is None and its model (and what it imports) is never loaded (the agent's memory,
    issue 30). Its errors keep their place (``policy.rules.0.approve``), as a nested model's."""

    def validate(value: Any) -> Any:
        return None if value is None else model().model_validate(value)

    return Annotated[Any, PlainValidator(validate)]
