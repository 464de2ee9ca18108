"""The packages the installer tests install, built once per session: a wheel of this repository,
its offline bundle for this interpreter (the one step that reads a package index; with the
collector's extra, so the agent and the collector install from it), and the
bundle's wheels as a local wheelhouse for the wheel-and-lock installs."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.installer import build_bundle, build_wheel, unpack, write_lock


@pytest.fixture(scope="session")
def wheel(tmp_path_factory) -> Path:
    return build_wheel(tmp_path_factory.mktemp("wheel"))


@pytest.fixture(scope="session")
def bundle(wheel, tmp_path_factory) -> Path:
    return build_bundle(wheel, tmp_path_factory.mktemp("bundle") / "se-forwarder-bundle.tar.gz",
                        extras="azure,webhook,collector")


@pytest.fixture(scope="session")
def wheelhouse(bundle, tmp_path_factory) -> Path:
    return unpack(bundle, tmp_path_factory.mktemp("unpacked")) / "wheels"


@pytest.fixture(scope="session")
def lock(wheel, wheelhouse, tmp_path_factory) -> Path:
    """The wheel's lock without extras (lock-dependencies.py against the wheelhouse)."""
    return write_lock(wheel, "none", tmp_path_factory.mktemp("lock") / "se_forwarder.lock",
                      wheelhouse)


@pytest.fixture(scope="session")
def azure_lock(wheel, wheelhouse, tmp_path_factory) -> Path:
    """With the azure extra: what the Run Command and cloud-init install."""
    return write_lock(wheel, "azure", tmp_path_factory.mktemp("lock") / "se_forwarder-azure.lock",
                      wheelhouse)
