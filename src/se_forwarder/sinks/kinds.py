"""Which sinks exist, each a self-contained package that registers itself when imported.

``NAMES`` is the static list of sink packages (``se_forwarder.sinks.<name>``), in the order sinks
are built, configured and reported; ``load()`` imports them by name, and each calls ``register``
with its ``SinkKind``: its configuration key, its pydantic model (light to import) and its builder,
which imports the sink's module and its SDK only when that sink is configured (an agent with the
file sink alone never loads an Azure SDK). The ``[sinks]`` section of the configuration is
``section()``, generated from what registered, so the configuration names no sink and adding a
sink is adding a package and its name here.
"""

from __future__ import annotations

import importlib
from typing import Any

from pydantic import BaseModel, ConfigDict, create_model

from .base import SinkKind
from .batching import BatchConfig

NAMES = ("stdout", "file", "log_analytics", "event_hubs", "webhook")

_REGISTERED: dict[str, SinkKind] = {}


def register(kind: SinkKind) -> SinkKind:
    """Called by a sink package's ``__init__`` with its declaration."""
    _REGISTERED[kind.name] = kind
    return kind


def load() -> dict[str, SinkKind]:
    """Every sink kind by configuration key, in ``NAMES`` order (the packages imported once)."""
    for name in NAMES:
        if name not in _REGISTERED:
            importlib.import_module(f"{__package__}.{name}")
    return {name: _REGISTERED[name] for name in NAMES}


class SinksSection(BaseModel):
    """Base of the ``[sinks]`` section: one optional table per sink kind."""

    model_config = ConfigDict(extra="forbid")

    def enabled(self) -> dict[str, BatchConfig]:
        """Configured sinks by key, in the order they are built."""
        return {k: v for k, v in self.__dict__.items() if v is not None}


def section() -> type[SinksSection]:
    """The ``[sinks]`` model: a table per registered kind (present = enabled), each validated by
    the model its package declares."""
    fields: dict[str, Any] = {name: (kind.config | None, None) for name, kind in load().items()}
    return create_model(
        "SinksConfig",
        __base__=SinksSection,
        __doc__="The [sinks] section, generated from the sink kinds.",
        **fields,
    )
