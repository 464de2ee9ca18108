"""Fixtures shared by the whole suite. Helpers that are not fixtures live in ``tests/helpers``;
running the agent as a process is the test bed's (``se_forwarder_testbed.agentproc``), and in
this process on a FakeClock too (``helpers.agentrun``).

End-to-end tests (processes, servers, the Azure stand-ins, external checkers) carry the ``e2e``
marker, so ``pytest -m "not e2e"`` is the quick loop; ``process`` marks a test that starts the
agent as a process, ``slow`` one that takes seconds of real time, ``tls`` one that needs the
Azure stand-ins (TLS, the Azure SDKs), ``external`` one that runs a program from outside the venv
(chromium, systemd-analyze, cloud-init, node, pip). ``bench`` (the scripts of bench/) and
``fleet_scale`` (minutes at fleet size) and ``fuzz`` (Hypothesis over hostile input, tests/fuzz)
are lanes of their own: deselected unless ``-m`` names them (``.ci/run`` names the benches and the
fuzz lane in its one run of the suite)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers.agentrun import AgentRun

from se_forwarder_testbed.agentproc import AgentProcess, write_config
from se_forwarder_testbed.fakeclock import FakeClock
from se_forwarder_testbed.simulator.server import Simulator
from se_forwarder_testbed.standins.tokens import TokenAuthority

LANES = ("bench", "fleet_scale", "fuzz")  # markers whose tests run only when -m names them
DURATIONS = Path(__file__).with_name("durations.json")  # seconds per module, a past run's


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Deselect (not skip) the tests of a lane the ``-m`` expression does not name; then the
    longest modules first (tests/durations.json, tools/test_durations.py), each kept whole: a
    parallel run given this order (``--no-loadscope-reorder``, scripts/test.sh) does not end
    with one worker alone on a long module that started last."""
    expr = config.getoption("markexpr") or ""
    for lane in (n for n in LANES if n not in expr):
        out = [i for i in items if i.get_closest_marker(lane)]
        if out:
            config.hook.pytest_deselected(items=out)
            items[:] = [i for i in items if not i.get_closest_marker(lane)]
    seconds = json.loads(DURATIONS.read_text()) if DURATIONS.is_file() else {}
    items.sort(key=lambda i: -seconds.get(i.nodeid.split("::")[0], 0.0))  # the module's path


@pytest.fixture(scope="session", autouse=True)
def kql_translations(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """One folder of duckdb-kql's translations for the whole run (report/kql/kqlcache.py), shared by
    every worker and every report process they start: a query is translated once per run, not
    once per process (translating is most of a small report's CPU)."""
    from helpers.once import shared_dir

    from se_forwarder.report.kql import kqlcache

    folder = (shared_dir(tmp_path_factory) or tmp_path_factory.getbasetemp()) / "kql-translations"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(kqlcache.ENV, str(folder))
        yield folder


@pytest.fixture(scope="session")
def authority() -> TokenAuthority:
    """The managed-identity token issuer the stand-ins trust (one key for the session)."""
    return TokenAuthority()


@pytest.fixture
def simulator() -> Iterator[Callable[..., Simulator]]:
    """``simulator(scenario=None, **kw)``: a started IMDS simulator, stopped after the test."""
    started: list[Simulator] = []

    def make(*args: Any, **kw: Any) -> Simulator:
        sim = Simulator(*args, **kw).start()
        started.append(sim)
        return sim

    yield make
    for sim in started:
        sim.stop()


@pytest.fixture
def clock() -> FakeClock:
    """A FakeClock: time moves only when the test (or ``AgentRun.wait_for``) moves it."""
    return FakeClock()


@pytest.fixture
def agent_run(tmp_path: Path, clock: FakeClock) -> Iterator[Callable[..., AgentRun]]:
    """``agent_run(imds_url, **config)``: the agent in this process on the ``clock`` fixture,
    with a config written under ``tmp_path`` as ``agent_process`` writes it (one at a time)."""
    runs: list[AgentRun] = []

    def make(imds_url: str, *, name: str = "agent", settle: bool = True, **config: Any) -> AgentRun:
        config.setdefault("state_dir", tmp_path / f"{name}-state")
        state_dir = config.pop("state_dir")
        path = write_config(tmp_path / f"{name}.toml", imds_url, state_dir, **config)
        run = AgentRun(path, clock, settle=settle)
        runs.append(run)
        return run

    yield make
    for run in runs:
        if run.alive:
            run.stop()


@pytest.fixture
def agent_process(tmp_path: Path) -> Iterator[Callable[..., AgentProcess]]:
    """``agent_process(imds_url, **config)``: ``se-forwarder run`` as a process with a config
    written under ``tmp_path`` (keywords go to ``write_config``; ``env=`` to the process). A
    process a test leaves running is killed at teardown."""
    procs: list[AgentProcess] = []

    def make(
        imds_url: str, *, env: dict[str, str] | None = None, name: str = "agent", **config: Any
    ) -> AgentProcess:
        config.setdefault("state_dir", tmp_path / f"{name}-state")
        state_dir = config.pop("state_dir")
        path = write_config(tmp_path / f"{name}.toml", imds_url, state_dir, **config)
        proc = AgentProcess(path, env=env)
        procs.append(proc)
        return proc

    yield make
    for proc in procs:
        if proc.proc.poll() is None:
            proc.kill9()
