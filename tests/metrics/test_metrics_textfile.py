"""The metrics textfile is written without trusting its directory (issue 18): a temporary file
only the agent can have made (never a name planted there, never through a symlink), renamed over
the textfile; a directory others than root and the agent may write is refused, said once; the
file is readable by node_exporter whatever the agent's umask (the unit's is 0077). The agent
runs in this process on the FakeClock (its chores run on its own thread)."""

from __future__ import annotations

import os
import stat

import pytest
from prometheus_client.parser import text_string_to_metric_families

VM = "vm-textfile"
CANNOT = "cannot write the metrics textfile"


def start(simulator, agent_run, clock, textfile):
    sim = simulator(vm_name=VM, clock=clock)
    return agent_run(
        sim.url,
        poll_interval=1.0,
        extra=f'\n[metrics]\ntextfile = "{textfile}"\ntextfile_interval = 1\n',
    )


def metric_names(path) -> set[str]:
    return {f.name for f in text_string_to_metric_families(path.read_text())}


@pytest.mark.e2e
def test_a_symlink_planted_at_a_predictable_temporary_name_is_not_followed(
    simulator, agent_run, clock, tmp_path
):
    victim = tmp_path / "victim.conf"  # a root-owned file elsewhere
    victim.write_text("precious\n")
    textfile = tmp_path / "textfile" / "se_forwarder.prom"
    textfile.parent.mkdir(mode=0o755)
    agent = start(simulator, agent_run, clock, textfile)
    try:
        # the name prometheus-client's write_to_textfile uses: <path>.<pid>.<thread id>
        (textfile.parent / f"{textfile.name}.{os.getpid()}.{agent.thread.ident}").symlink_to(victim)
        textfile.unlink()
        textfile.symlink_to(victim)  # and one at the textfile's own name: replaced, not followed
        clock.advance(3)
        assert victim.read_text() == "precious\n"
        assert not textfile.is_symlink() and "se_forwarder_polls" in metric_names(textfile)
    finally:
        assert agent.stop() == 0
    assert victim.read_text() == "precious\n"
    assert not [p for p in textfile.parent.iterdir() if p.name.endswith(".tmp")]


@pytest.mark.e2e
def test_a_directory_others_may_write_is_refused_once_and_used_again_when_fixed(
    simulator, agent_run, clock, tmp_path
):
    textfile = tmp_path / "textfile" / "se_forwarder.prom"
    textfile.parent.mkdir()
    textfile.parent.chmod(0o777)  # any local user could plant names or swap the file
    agent = start(simulator, agent_run, clock, textfile)
    try:
        clock.advance(5)  # five rewrites due
        assert not textfile.exists()
        [line] = agent.messages(CANNOT)
        assert line["level"] == "warning" and "writable by its group or by others" in line["error"]
        assert agent.alive
        textfile.parent.chmod(0o755)
        clock.advance(2)
        assert "se_forwarder_polls" in metric_names(textfile)
        assert len(agent.messages("metrics textfile written again")) == 1
    finally:
        assert agent.stop() == 0
    assert len(agent.messages(CANNOT)) == 1


@pytest.mark.e2e
def test_the_textfile_is_readable_by_node_exporter_under_the_units_umask(
    simulator, agent_run, clock, tmp_path
):
    textfile = tmp_path / "textfile" / "se_forwarder.prom"
    old = os.umask(0o077)  # systemd's UMask=0077 for the agent
    try:
        agent = start(simulator, agent_run, clock, textfile)
        clock.advance(2)
        assert agent.stop() == 0
    finally:
        os.umask(old)
    assert stat.S_IMODE(textfile.stat().st_mode) == 0o644
