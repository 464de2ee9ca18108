"""Issue 32's done-when: a service of 6 VMs with 6 reboots due at the same NotBefore is approved
early at most 2 at a time, one zone at a time, under random kill -9 of agents, crashes of the
coordinator's store, a partition between one agent and the store and one VM's clock off, with
a record of each decision (se_forwarder_testbed.spread: six real agent processes, six IMDS
simulators, Azurite; the observer reads the simulators and the delivered records only)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from se_forwarder_testbed.spread.chaos import plan
from se_forwarder_testbed.spread.observer import Window, _most
from se_forwarder_testbed.spread.stand import Shape


def test_a_plan_is_the_seeds_and_says_what_it_does():
    a, b = plan(7, Shape()), plan(7, Shape())
    assert a == b and a != plan(8, Shape())
    text = "\n".join(a.lines())
    assert text.startswith("chaos seed 7: 10 faults; vm ") and "clock is" in text
    kinds = {f.kind for f in a.faults}
    assert kinds == {"kill -9 agent", "kill -9 agent at its admission", "store crash", "partition"}


def test_the_observer_counts_early_windows_that_overlap():
    def w(vm: int, zone: str, start: float, end: float) -> Window:
        return Window(vm, zone, start, end, not_before=100.0)

    assert _most([w(0, "1", 10, 20), w(1, "1", 15, 30), w(2, "2", 31, 40)]) == (2, 1)
    assert _most([w(0, "1", 10, 20), w(1, "1", 15, 30), w(2, "2", 19, 40)]) == (3, 2)
    # at NotBefore Azure starts the rest: not an early approval, not counted
    assert _most([w(0, "1", 90, 120), w(1, "2", 100, 200), w(2, "3", 100, 200)]) == (1, 1)


@pytest.fixture
def azurite_installed():
    from se_forwarder_testbed.standins.azurite import executable

    if executable() is None:
        pytest.skip("Azurite is not installed (npm ci --prefix tools/azurite)")


@pytest.mark.e2e
@pytest.mark.process
@pytest.mark.tls
@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("seed", [3, 5])
def test_six_agents_spread_their_reboots_under_chaos(tmp_path, azurite_installed, seed):
    from se_forwarder_testbed.spread.run import play

    p = plan(seed, Shape())
    result = play(tmp_path, p.shape, p)
    text = "\n".join(result.lines())
    print(text)
    v = result.judgement
    assert v.ok, text  # at most 2 in one zone before NotBefore, no approval out of the store's
    # reach, every event over, each decision one record
    assert result.store_kills == 2 and result.agent_starts > 6, text  # the chaos happened
    early = [w for w in v.windows if w.early]
    # the policy approved early through the chaos: at least N VMs before NotBefore. Not held
    # here: how many more, and whether N were ever in impact at once. In a notice compressed to
    # 30 s of wall time they depend on the machine's pace (a CI run beside other work: seed 3
    # reused the slots one at a time, seed 5 never before NotBefore); slots given back and taken
    # again are tests/policy/test_service_coordinator.py's, on the coordinator's own clock.
    assert len(early) >= p.shape.n, text


@pytest.mark.e2e
@pytest.mark.process
@pytest.mark.tls
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_observer_sees_a_service_approved_all_at_once(tmp_path, azurite_installed):
    """The same stand with the coordination broken (N = 6 and no zones apart: every agent is
    admitted at once), held to N = 2, one zone: the observer must report it."""
    from se_forwarder_testbed.spread.run import play

    shape = Shape()
    result = play(tmp_path, replace(shape, n=6, spread="none"), expect=shape)
    v = result.judgement
    assert not v.ok and v.most > 2 and v.zones > 1, "\n".join(result.lines())


def test_an_approval_sent_again_at_a_restart_was_decided_at_the_admission():
    """vm 1 killed at its admission (0.0 s, its claim in the store), started again at 1.3 s; the
    store down from 2.6 s. Its approval reaching Azure at 5.6 s is the one decided at 0.0 s, sent
    again at the restart (a loaded machine: the restart's first poll 4 s late); one reaching Azure
    after the restart's boot and grace, or from a VM not killed at its admission, was decided
    when it came."""
    from se_forwarder_testbed.spread.chaos import Outages
    from se_forwarder_testbed.spread.observer import BOOT, GRACE, decided_at

    t0 = 1000.0
    o = Outages(store=[(t0 + 2.6, t0 + 10.4)], agents={1: [(t0, t0 + 1.3)]}, admitted={1: t0})
    assert decided_at(1, t0 + 5.6, o) == t0
    late = t0 + 1.3 + BOOT + GRACE + 0.1
    assert decided_at(1, late, o) == late
    assert decided_at(2, t0 + 5.6, o) == t0 + 5.6
