"""install.sh's refusals: a clear message, a non-zero exit and nothing half-installed (usage, no
usable Python, IMDS unreachable, no package index, a missing wheel). Split from test_install.py;
what is real and what is not: conftest.py."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.install_runs import collector_toml, out
from helpers.installer import DEAD_INDEX, free_port

pytestmark = [pytest.mark.e2e, pytest.mark.external]


def test_usage_errors(inst, tmp_path):
    r = inst.install("--file-sink", "/tmp/x.jsonl")
    assert r.returncode == 2 and "--package" in r.stderr and "--index-url" in r.stderr, out(r)
    r = inst.install("--bogus")
    assert r.returncode == 2 and "unknown argument: --bogus" in r.stderr, out(r)
    r = inst.install("--version", "0.1.0", "--index-url", DEAD_INDEX)
    assert r.returncode == 2 and "no configuration" in r.stderr, out(r)
    r = inst.install("--version", "latest", "--stdout-sink")
    assert r.returncode == 2 and "exact version" in r.stderr, out(r)
    r = inst.install(
        "--version",
        "0.1.0",
        "--index-url",
        DEAD_INDEX,
        "--logs-endpoint",
        "https://x.ingest.monitor.azure.com",
    )
    assert r.returncode == 2 and "--dcr-id" in r.stderr, out(r)
    r = inst.install("--package", "x.whl", "--package-sha256", "abc", "--stdout-sink")
    assert r.returncode == 2 and "64 hex digits" in r.stderr, out(r)
    r = inst.install("--package", "http://example.org/x.whl", "--stdout-sink")
    assert r.returncode == 2 and "must be https://" in r.stderr, out(r)
    r = inst.install("--package", "b.tar.gz", "--lock", "x.lock", "--stdout-sink")
    assert r.returncode == 2 and "a bundle carries one lock per" in r.stderr, out(r)
    secret = tmp_path / "url"
    secret.write_text("https://hooks.example/x\n")
    # an explicit --extras without webhook is refused (the default extras take it)
    r = inst.install(
        "--package", "b.tar.gz", "--webhook-url-file", str(secret), "--extras", "azure"
    )
    assert r.returncode == 2 and "needs the webhook extra" in r.stderr, out(r)
    r = inst.install(
        "--package", "b.tar.gz", "--stdout-sink", "--credential", "../x=" + str(secret)
    )
    assert r.returncode == 2 and "--credential takes NAME=FILE" in r.stderr, out(r)
    r = inst.install("--package", "b.tar.gz", "--stdout-sink", "--credential", "x=/nonexistent")
    assert r.returncode == 2 and "credential x: cannot read /nonexistent" in r.stderr, out(r)
    assert not inst.opt.exists()


def test_collector_usage_errors(inst, tmp_path):
    """--collector: its configuration from a file only, and the collector extra; refused before
    anything is installed."""
    given = tmp_path / "collector.toml"
    given.write_text(collector_toml(tmp_path))
    r = inst.install("--collector", "--package", "b.tar.gz", "--stdout-sink")
    assert (
        r.returncode == 2 and "--collector takes its configuration from --config-file" in r.stderr
    ), out(r)
    r = inst.install("--collector", "--package", "b.tar.gz")
    assert r.returncode == 2 and "--collector needs --config-file" in r.stderr, out(r)
    r = inst.install(
        "--collector", "--package", "b.tar.gz", "--config-file", str(given), "--extras", "azure"
    )
    assert r.returncode == 2 and "needs the collector extra" in r.stderr, out(r)
    r = inst.install(
        "--collector",
        "--package",
        "b.tar.gz",
        "--config-file",
        str(given),
        "--wait-delivery",
        "300",
    )
    assert r.returncode == 2 and "--wait-delivery is the agent's" in r.stderr, out(r)
    assert not inst.opt.exists()


def test_version_never_comes_from_an_index_nobody_named(inst):
    """se-forwarder is not on the public index: a name anyone can register there is never
    installed as root."""
    r = inst.install("--version", "0.1.0", "--stdout-sink")
    assert r.returncode == 2 and "--version needs --index-url" in r.stderr, out(r)
    assert not inst.opt.exists()


def test_no_python(inst, tmp_path):
    r = inst.install(
        "--version",
        "0.1.0",
        "--index-url",
        DEAD_INDEX,
        "--stdout-sink",
        python=str(tmp_path / "nope"),
    )
    assert r.returncode == 10 and "Python not found" in r.stderr, out(r)
    old = tmp_path / "python-old"
    old.write_text("#!/bin/sh\necho 'Python 2.7.18' >&2\nexit 1\n")
    old.chmod(0o755)
    r = inst.install(
        "--version", "0.1.0", "--index-url", DEAD_INDEX, "--stdout-sink", python=str(old)
    )
    assert r.returncode == 10 and "needs Python 3.11+" in r.stderr, out(r)
    assert not inst.opt.exists()


@pytest.mark.parametrize(
    "os_release,says",
    [
        ('ID=debian\nVERSION_ID="12"\n', "on this system, apt-get install python3 python3-venv"),
        (
            'ID=ubuntu\nVERSION_ID="22.04"\nID_LIKE=debian\n',
            "Ubuntu 22.04 ships a Python older than 3.11",
        ),
        ('ID="rhel"\nVERSION_ID="9.4"\nID_LIKE="fedora"\n', "dnf install python3.11"),
        ('ID=azurelinux\nVERSION_ID="3.0"\n', "tdnf install python3"),
    ],
)
def test_without_a_usable_python_it_says_what_to_install_here(inst, tmp_path, os_release, says):
    """No python3 on PATH with venv: install.sh looks for one and names this distribution's
    package (read from os-release), instead of a generic hint."""
    bin_dir = tmp_path / "bin"  # this system's commands, but no Python at all
    bin_dir.mkdir()
    for tool in Path("/usr/bin").iterdir():
        if not tool.name.startswith("python") and not (bin_dir / tool.name).exists():
            (bin_dir / tool.name).symlink_to(tool)
    release = tmp_path / "os-release"
    release.write_text(os_release)
    r = inst.install(
        "--version",
        "0.1.0",
        "--index-url",
        DEAD_INDEX,
        "--stdout-sink",
        python=None,
        PATH=str(bin_dir),
        SE_FORWARDER_OS_RELEASE=str(release),
    )
    assert r.returncode == 10 and "no Python 3.11+ with venv found" in r.stderr, out(r)
    assert says in r.stderr, out(r)


def test_install_prerequisites_installs_the_distributions_python(inst, tmp_path):
    """--install-prerequisites (what the Run Command and the extension pass): with no usable
    Python, the distribution's package manager installs it, then the install goes on (here to
    the IMDS check). apt-get is a stand-in that records its arguments and provides python3."""
    from helpers.installer import system_python

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in Path("/usr/bin").iterdir():
        if not tool.name.startswith(("python", "apt")) and not (bin_dir / tool.name).exists():
            (bin_dir / tool.name).symlink_to(tool)
    calls = tmp_path / "apt-calls"
    (bin_dir / "apt-get").write_text(
        f'#!/bin/sh\necho "$@" >> {calls}\n'
        f'case " $* " in *" install "*) ln -sf {system_python()} {bin_dir}/python3 ;; esac\n'
    )
    (bin_dir / "apt-get").chmod(0o755)
    release = tmp_path / "os-release"
    release.write_text('ID=debian\nVERSION_ID="12"\n')
    r = inst.install(
        "--version",
        "0.1.0",
        "--index-url",
        DEAD_INDEX,
        "--stdout-sink",
        "--install-prerequisites",
        "--imds-endpoint",
        f"http://127.0.0.1:{free_port()}",
        python=None,
        PATH=str(bin_dir),
        SE_FORWARDER_OS_RELEASE=str(release),
    )
    assert "installing the distribution's (debian 12)" in r.stdout, out(r)
    assert "install -y -q python3 python3-venv" in calls.read_text()
    assert r.returncode == 12 and "installed Python 3." in r.stdout, out(r)


def test_imds_unreachable(inst):
    port = free_port()  # nothing listens there
    r = inst.install(
        "--version",
        "0.1.0",
        "--index-url",
        DEAD_INDEX,
        "--stdout-sink",
        "--imds-endpoint",
        f"http://127.0.0.1:{port}",
    )
    assert r.returncode == 12, out(r)
    assert "IMDS unreachable" in r.stderr and "proxy" in r.stderr
    assert not inst.opt.exists(), "nothing may be installed when IMDS is unreachable"


def test_no_network_to_index_and_imds_check_ignores_proxy(inst, sim):
    dead = f"http://127.0.0.1:{free_port()}"
    r = inst.install(
        "--version",
        "0.1.0",
        "--stdout-sink",
        "--imds-endpoint",
        sim.url,
        "--index-url",
        dead + "/simple",
        http_proxy=dead,
        HTTP_PROXY=dead,
        https_proxy=dead,
        HTTPS_PROXY=dead,
        PIP_RETRIES="0",
        PIP_TIMEOUT="3",
        timeout=180,
        PIP_EXTRA_INDEX_URL="file:///opt/elsewhere/simple",
    )
    # IMDS passed although every proxy variable points at a dead proxy ...
    assert "IMDS reachable" in r.stdout, out(r)
    # ... and the package index failed cleanly
    assert r.returncode == 11 and "could not install se-forwarder[azure]==0.1.0" in r.stderr, out(r)
    # only the named index was asked, not one from pip's environment or configuration
    looked = [
        line
        for line in (inst.opt / "install.log").read_text().splitlines()
        if line.startswith("Looking in indexes:")
    ]
    assert looked == [f"Looking in indexes: {dead}/simple"], looked
    assert list((inst.opt / "versions").iterdir()) == [], "failed virtualenv left behind"
    assert not (inst.opt / "current").exists()
    assert not inst.config.exists()


def test_missing_wheel_file(inst, sim, tmp_path):
    r = inst.install(
        "--package",
        str(tmp_path / "se_forwarder-9.9.9-py3-none-any.whl"),
        "--stdout-sink",
        "--imds-endpoint",
        sim.url,
    )
    assert r.returncode == 11 and "no such file" in r.stderr, out(r)
