"""The sinks an agent can have, by configuration key, each a self-contained package.

A package (``se_forwarder.sinks.<name>``) exposes ``NAME``, ``Config`` (its pydantic model, light
to import) and ``build(cfg, identity)``, which imports the sink's module and its SDK only when
that sink is configured: an agent with the file sink alone never loads an Azure SDK.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..config import Config
    from .base import Sink

# Configuration key -> package; the order is the order sinks are built and reported in.
PACKAGES: dict[str, str] = {
    "stdout": "se_forwarder.sinks.stdout",
    "file": "se_forwarder.sinks.file",
    "log_analytics": "se_forwarder.sinks.log_analytics",
    "event_hubs": "se_forwarder.sinks.event_hubs",
    "webhook": "se_forwarder.sinks.webhook",
}


def package(name: str) -> ModuleType:
    return importlib.import_module(PACKAGES[name])


def build(config: Config) -> list[Sink]:
    """One sink per configured section, in ``PACKAGES`` order."""
    sinks: list[Sink] = []
    for name, cfg in config.sinks.enabled().items():
        pkg = package(name)
        extra = {"policy": config.policy} if getattr(pkg, "USES_POLICY", False) else {}
        sinks.append(pkg.build(cfg, config.identity, **extra))
    return sinks
