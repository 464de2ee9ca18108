"""The packages the installer tests install, built once per test run: a wheel of this repository,
its offline bundle for this interpreter (the one step that reads a package index; with the
collector's extra, so the agent and the collector install from it), and the bundle's wheels as a
local wheelhouse for the wheel-and-lock installs.

The installer tests are split over several files (tests/infra/install/), which the parallel run
(``--dist loadfile``) hands to different workers: the first worker that needs a build makes it
under a lock in the run's shared temporary directory, and the others take it from there."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.installer import build_bundle, build_wheel, unpack, write_lock
from helpers.once import once


@pytest.fixture(scope="session")
def wheel(tmp_path_factory) -> Path:
    return once(tmp_path_factory, "wheel", build_wheel)


@pytest.fixture(scope="session")
def bundle(wheel, tmp_path_factory) -> Path:
    return once(
        tmp_path_factory,
        "bundle",
        lambda d: build_bundle(
            wheel, d / "se-forwarder-bundle.tar.gz", extras="azure,webhook,collector"
        ),
    )


@pytest.fixture(scope="session")
def wheelhouse(bundle, tmp_path_factory) -> Path:
    return once(tmp_path_factory, "unpacked", lambda d: unpack(bundle, d) / "wheels")


@pytest.fixture(scope="session")
def lock(wheel, wheelhouse, tmp_path_factory) -> Path:
    """The wheel's lock without extras (lock-dependencies.py against the wheelhouse)."""
    return once(
        tmp_path_factory,
        "lock",
        lambda d: write_lock(wheel, "none", d / "se_forwarder.lock", wheelhouse),
    )


@pytest.fixture(scope="session")
def azure_lock(wheel, wheelhouse, tmp_path_factory) -> Path:
    """With the azure extra: what the Run Command and cloud-init install."""
    return once(
        tmp_path_factory,
        "azure-lock",
        lambda d: write_lock(wheel, "azure", d / "se_forwarder-azure.lock", wheelhouse),
    )
