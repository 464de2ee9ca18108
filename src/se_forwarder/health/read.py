"""Reading status.json back, tolerantly (a file from another version, or damaged): pydantic at
the edge, through a model generated from the declaration (health/fields.py), so the reader follows
every field added there. An unusable value becomes None (a nested figure keeps its default); a
bad time at the top is also named in the problems (it hides how fresh the status is).

The models are built on first use: the agent, which only writes status.json, never builds them.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from dataclasses import MISSING, fields
from typing import Annotated, Any, ClassVar, TypeVar, overload

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    ValidatorFunctionWrapHandler,
    WrapValidator,
    create_model,
)

from ..timefmt import parse_iso_ms
from .fields import Time, specs
from .snapshot import OpenEvent, SinkHealth, Snapshot

# status.json's "role" in the collector's file (``se-forwarder collect``): how ``status`` tells it
# from an agent's, without importing the collector
COLLECTOR_ROLE = "collector"


def is_collector(data: Mapping[str, Any]) -> bool:
    return data.get("role") == COLLECTOR_ROLE


PROBLEMS = "problems"  # the validation context's list of problems


def parse_time(value: Any) -> float | None:
    """A status.json time as epoch seconds: ISO 8601 (``Z`` or offset; naive = UTC), epoch
    milliseconds (above 1e11) or epoch seconds. None/empty gives None; anything else ValueError."""
    if value is None or value == "":
        return None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if not math.isfinite(value):
            raise ValueError(f"not a time: {value!r}")
        return value / 1000.0 if abs(value) > 1e11 else float(value)
    if isinstance(value, str):
        return parse_iso_ms(value) / 1000.0
    raise ValueError(f"not a time: {value!r}")


D = TypeVar("D")


@overload
def read(data: Mapping[str, Any]) -> tuple[Snapshot, list[str]]: ...
@overload
def read(data: Mapping[str, Any], cls: type[D]) -> tuple[D, list[str]]: ...
def read(data: Mapping[str, Any], cls: type[Any] = Snapshot) -> tuple[Any, list[str]]:
    """A snapshot (or another declared dataclass, ``cls``) from status.json's object, and the
    problems found. Keys it does not declare are left out; absent ones take their default."""
    problems: list[str] = []
    declared: type = cls  # a plain ``type``: hashable, as the cache needs
    doc = document_model(declared).model_validate(dict(data), context={PROBLEMS: problems})
    return cls(**{name: getattr(doc, name) for name in doc.model_fields_set}), problems


def figures(cls: type, data: Any) -> Any:
    """A nested declared dataclass (a sink's figures, a partition's) from its object; an unusable
    value keeps the field's default, a value that is not an object gives all defaults."""
    doc = document_model(cls, top=False).model_validate(data if isinstance(data, dict) else {})
    assert isinstance(doc, _Figures)  # top=False: built on _Figures
    return doc.value()


def _or_none(value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
    try:
        return handler(value)
    except ValidationError:
        return None


def _time(value: Any, handler: ValidatorFunctionWrapHandler, info: ValidationInfo) -> Any:
    try:
        return parse_time(value)
    except (ValueError, TypeError):
        if info.context is not None and info.field_name is not None:
            info.context[PROBLEMS].append(f"{info.field_name} is not a valid time: {value!r}")
        return None


def _text(value: Any, handler: ValidatorFunctionWrapHandler, info: ValidationInfo) -> Any:
    """Top level: any other value as its text (what an older agent may have written); nested:
    text only."""
    if value is None or isinstance(value, str):
        return value
    return str(value) if info.context is not None and not isinstance(value, bool) else None


def _events(value: Any) -> tuple[OpenEvent, ...]:
    """The open events as listed, entries that are not objects left out; fields taken as they
    are (the list is shown, not computed on)."""
    if not isinstance(value, (list, tuple)):
        return ()
    return tuple(OpenEvent(**_named(e, OpenEvent)) for e in value if isinstance(e, dict))


def _named(value: dict[str, Any], cls: type) -> dict[str, Any]:
    """``value``'s entries for each field of dataclass ``cls`` (None where absent)."""
    return {f.name: value.get(f.name) for f in fields(cls)}


def _lines(value: Any) -> tuple[str, ...]:
    """Lines of text as listed (``acted_events``); anything else left out."""
    if not isinstance(value, (list, tuple)):
        return ()
    return tuple(v for v in value if isinstance(v, str))


def _sinks(value: Any) -> dict[str, SinkHealth]:
    if not isinstance(value, dict):
        return {}
    return {str(k): figures(SinkHealth, v) for k, v in value.items() if isinstance(v, dict)}


_STRICT = ConfigDict(strict=True, extra="ignore")
_KINDS: dict[type, Any] = {
    bool: Annotated[bool | None, WrapValidator(_or_none)],
    int: Annotated[int | None, WrapValidator(_or_none)],
    float: Annotated[float | None, Field(allow_inf_nan=False), WrapValidator(_or_none)],
    str: Annotated[str | None, WrapValidator(_text)],
    Time: Annotated[float | None, WrapValidator(_time)],
    tuple: Annotated[Any, WrapValidator(lambda v, _h: _events(v))],
    list: Annotated[Any, WrapValidator(lambda v, _h: _lines(v))],
    dict: Annotated[Any, WrapValidator(lambda v, _h: _sinks(v))],
}


class _Figures(BaseModel):
    """A nested dataclass's read: the usable values only (the rest keep their defaults)."""

    model_config = ConfigDict(strict=True, extra="ignore", defer_build=True)  # not on import
    declared: ClassVar[type] = object

    def value(self) -> Any:
        return self.declared(
            **{n: v for n in self.model_fields_set if (v := getattr(self, n)) is not None}
        )


@functools.cache
def document_model(cls: type, *, top: bool = True) -> type[BaseModel]:
    """The pydantic model status.json is read with: ``cls``'s declared fields, each optional and
    lenient by its kind (``top``: the file's object; else a nested one, read by ``figures``)."""
    declared = dict(specs(cls))
    defaults = {f.name: None if f.default is MISSING else f.default for f in fields(cls)}

    class Nested(_Figures):
        declared = cls

    model: type[BaseModel] = create_model(  # type: ignore[call-overload]
        f"{cls.__name__}Document",
        __config__=_STRICT if top else None,
        __base__=None if top else Nested,
        **{name: (_KINDS[spec.kind], defaults[name]) for name, spec in declared.items()},
    )
    return model
