"""Fixtures the delivery tests share; each module brings its own module-scoped ``world``
(``helpers.azure.AzureWorld``)."""

from __future__ import annotations

import pytest


@pytest.fixture
def w(world):
    """A clean world per test: no events served, nothing stored, no faults."""
    world.sim.set_events([])
    world.clean()
    yield world
    world.clean()
