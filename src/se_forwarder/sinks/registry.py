"""Builds the configured sinks, each from its section and the one ``SinkContext`` (Vector's
``build(cx)``), in ``kinds.NAMES`` order; a sink's module (and its SDK) is imported only then."""

from __future__ import annotations

from .base import Sink, SinkContext
from .kinds import SinksSection, kind


def build(sinks: SinksSection, cx: SinkContext) -> list[Sink]:
    """One sink per configured section of ``[sinks]``."""
    return [kind(name).build(cfg, cx) for name, cfg in sinks.enabled().items()]
