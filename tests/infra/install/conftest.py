"""infra/scripts/install.sh, run for real in an isolated prefix.

What is real: bash runs the installer; it finds Python, checks IMDS (the simulator) with proxies
disabled, builds a virtualenv, pip-installs a wheel built from this repository (from an offline
bundle with no package index at all, or with a hash-checked lock from a local wheelhouse),
writes and validates the config, stores credentials, switches the `current` symlink, writes the
systemd unit and its drop-in, and verifies health with `se-forwarder status`. The installed
agent runs against the IMDS simulator, as the unit's unprivileged user when the tests run as
root, and is stopped with SIGTERM.

What is not: systemd is not PID 1 here, so SE_FORWARDER_SYSTEMCTL points at a stand-in
(tests/helpers/fake_systemctl.py) that starts the unit's ExecStart= as systemd would for this
unit (Environment=, WorkingDirectory=, UMask=, DynamicUser= as `nobody`, LoadCredential= into
$CREDENTIALS_DIRECTORY) and stops it with KillSignal= within TimeoutStopSec=. The sandboxing
directives are checked statically in test_systemd.py.

The wheel, the bundle and the wheelhouse are built once per test run (tests/infra/conftest.py);
the tests are split over this folder's files so that a parallel run spreads them over its workers.
"""

from __future__ import annotations

import shutil

import pytest
from helpers.installer import Env, reachable_dir

from se_forwarder_testbed.simulator import Simulator


@pytest.fixture
def sim():
    s = Simulator("live-migration-freeze", first_call_delay=0.0, speed=20.0)
    s.start()
    yield s
    s.stop()


@pytest.fixture
def inst(wheelhouse):
    base = reachable_dir()
    e = Env(base, wheelhouse)
    yield e
    e.kill_agent()  # only the agent this test started, by its pid
    shutil.rmtree(base, ignore_errors=True)
