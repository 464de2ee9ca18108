"""What the installer refuses before anything is written: a bad fleet setting (an undefined hook
is found by the new version's check-config, so that case builds the virtualenv it validates with;
the others are refused before any virtualenv is built), and an interpreter the sandboxed service
cannot run. Apart from test_install_fleet.py so that ``--dist loadfile``
runs these installs on another worker than the fleet settings' (what is real: conftest.py)."""

from __future__ import annotations

import subprocess

import pytest
from helpers.install_runs import no_index, out

pytestmark = [pytest.mark.e2e, pytest.mark.external]


@pytest.mark.parametrize(
    "args,said",
    [
        (["--policy-rules", '[{"event_types": ["Reboot"], "pre_hooks": ["drain"]}]'], "drain"),
        (["--policy-rules", "[{not json"], "not JSON"),
        (["--policy-rules", '{"a": 1}'], "JSON array"),
        (["--policy-preset", "approve-all"], "observe or microsoft"),
        (["--tags", "service,a/b"], "Azure tag names cannot hold"),
        (["--tags", "service,,env"], "empty tag name"),
    ],
    ids=["undefined-hook", "bad-json", "not-an-array", "bad-preset", "bad-tag", "empty-tag"],
)
def test_a_bad_fleet_setting_is_refused_before_anything_is_written(
    inst, sim, bundle, tmp_path, args, said
):
    r = inst.install(
        "--package",
        str(bundle),
        "--imds-endpoint",
        sim.url,
        "--stdout-sink",
        *args,
        **no_index(),
    )
    assert r.returncode == 2 and said in r.stderr, out(r)
    # only check-config's refusal needs the new version's virtualenv
    assert ("creating virtualenv" in r.stdout) == (said == "drain"), out(r)
    assert not inst.config.exists() and not (inst.opt / "current").exists()
    assert not list((inst.opt / "versions").glob("*")) if inst.opt.exists() else True


def test_an_interpreter_the_service_cannot_run_is_refused(inst, sim, tmp_path):
    """A Python under a directory others may not enter (root's home, a pyenv under it) makes a
    virtualenv the sandboxed service cannot run: refused with why, before anything is written."""
    private = inst.base / "private"
    private.mkdir(mode=0o700)
    private.chmod(0o700)
    subprocess.run(
        ["/usr/bin/python3", "-m", "venv", "--copies", "--without-pip", str(private / "py")],
        check=True,
    )
    r = inst.install(
        "--package",
        "x.whl",
        "--imds-endpoint",
        sim.url,
        "--stdout-sink",
        python=str(private / "py/bin/python3"),
    )
    assert r.returncode == 10, out(r)
    assert "cannot be the service's interpreter" in r.stderr
    assert f"{private} is mode 0700" in r.stderr, out(r)
    assert not inst.opt.exists()
