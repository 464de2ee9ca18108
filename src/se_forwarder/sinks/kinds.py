"""Which sinks exist, each a self-contained package that registers itself when imported.

``NAMES`` is the static list of sink packages (``se_forwarder.sinks.<name>``), in the order sinks
are built, configured and reported; ``kind(name)`` imports one by name (``load()`` all of them),
and each calls ``register`` with its ``SinkKind``: its configuration key, its pydantic model and
its builder, which imports the sink's module and its SDK only when that sink is configured (an
agent with the file sink alone never loads an Azure SDK). The ``[sinks]`` section of the
configuration is ``section()``, a table per name, each validated by its package's model, the
package imported only when the table is present (an unconfigured sink costs the agent nothing), so
the configuration names no sink and adding a sink is adding a package and its name here.
"""

from __future__ import annotations

import importlib
from typing import Any

from pydantic import BaseModel, ConfigDict, create_model

from ..config_types import section_of
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
    return {name: kind(name) for name in NAMES}


def kind(name: str) -> SinkKind:
    """One sink kind, its package imported on first use (the agent imports only the configured
    sinks' packages: an unconfigured sink's model is never built)."""
    if name not in _REGISTERED:
        importlib.import_module(f"{__package__}.{name}")
    return _REGISTERED[name]


class SinksSection(BaseModel):
    """Base of the ``[sinks]`` section: one optional table per sink kind."""

    model_config = ConfigDict(extra="forbid")

    def enabled(self) -> dict[str, BatchConfig]:
        """Configured sinks by key, in the order they are built."""
        return {k: v for k, v in self.__dict__.items() if v is not None}


def section() -> type[SinksSection]:
    """The ``[sinks]`` model: a table per kind (present = enabled), each validated by the model
    its package declares, the package imported only when the table is present."""
    fields: dict[str, Any] = {name: (_config_of(name), None) for name in NAMES}
    return create_model(
        "SinksConfig",
        __base__=SinksSection,
        __doc__="The [sinks] section, generated from the sink kinds.",
        **fields,
    )


def _config_of(name: str) -> Any:
    return section_of(lambda: kind(name).config)
