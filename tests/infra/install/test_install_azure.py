"""The installers as Azure calls them: the Custom Script extension's command and the Run Command
(parameters as the handler passes them, the package and its lock from blob storage with the
managed identity). Split from test_install.py;
what is real and what is not: conftest.py."""

from __future__ import annotations

import hashlib
import subprocess

import pytest
from bicep_eval import Evaluator
from helpers.install_runs import out
from helpers.installer import INSTALL_SH, BlobStandIn, free_port

pytestmark = [pytest.mark.e2e, pytest.mark.external]


SHARED_BICEP = INSTALL_SH.parents[2] / "infra" / "modules" / "shared.bicep"


def _settings(**over) -> dict:
    base = {
        "packageUri": "https://a.blob.core.windows.net/c/se_forwarder-0.1.0-py3-none-any.whl",
        "packageSha256": "",
        "lockUri": "https://a.blob.core.windows.net/c/se_forwarder-0.1.0.lock",
        "logsIngestionEndpoint": "https://x.ingest.monitor.azure.com",
        "dcrImmutableId": "dcr-0123",
        "recordsStream": "Custom-ScheduledEvents",
        "heartbeatsStream": "Custom-ScheduledEventsAgent",
        "clientId": "",
    }
    return {**base, **over}


def _shared():
    return Evaluator(SHARED_BICEP)


def test_extension_command_for_linux_is_accepted_by_install_sh():
    import shlex

    command = _shared().call("linuxInstallCommand", "install.sh", _settings(packageSha256="a" * 64))
    argv = shlex.split(command)
    assert argv[:2] == ["sh", "-c"] and argv[3:5] == ["bash", "install.sh"]
    assert "--client-id" in argv and "--install-prerequisites" in argv
    # every option parses (an unknown one would exit 2 before --help is reached)
    r = subprocess.run(
        ["bash", str(INSTALL_SH), *argv[5:], "--help"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert r.returncode == 0 and "Usage: install.sh" in r.stdout, out(r)


def test_extension_command_retries_only_while_the_download_is_refused(tmp_path):
    """The loop around install.sh: exit 11 (a 403 while a new role assignment applies) and 12
    are retried, anything else ends it with install.sh's own status."""
    import shlex

    argv = shlex.split(_shared().call("linuxInstallCommand", "install.sh", _settings()))
    script = argv[2].replace("sleep 90", "sleep 0")
    assert script != argv[2]
    for codes, expected_calls, rc in (
        ("11 11 0", 3, 0),
        ("11 2", 2, 2),
        ("13", 1, 13),
        ("12 " * 10, 10, 12),
    ):
        stub = tmp_path / "install.sh"
        calls = tmp_path / "calls"
        calls.unlink(missing_ok=True)
        stub.write_text(
            f"echo x >> {calls}\nset -- {codes}\nn=$(wc -l < {calls})\n"
            'eval "rc=\\${$n}"\nexit $rc\n'
        )
        r = subprocess.run(
            ["sh", "-c", script, "bash", str(stub)],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert r.returncode == rc and len(calls.read_text().split()) == expected_calls, (codes, r)


def run_command_invocation(parameters: list[dict]) -> tuple[list[str], dict[str, str]]:
    """What Azure's Linux Run Command handler does with the parameters (Azure/run-command-
    handler-linux, internal/exec): a named one becomes an environment variable, an unnamed one is
    appended to `bash -c "<script>"` unquoted; empty values are dropped."""
    args, env = [], {}
    for p in parameters:
        if p["value"]:
            if p["name"]:
                env[p["name"]] = p["value"]
            else:
                args.append(p["value"])
    return args, env


def test_unknown_run_command_variables_are_refused(inst):
    r = inst.install("--from-env", SE_INSTALL_PAKAGE="x")
    assert r.returncode == 2 and "unknown environment variable SE_INSTALL_PAKAGE" in r.stderr, out(
        r
    )
    # and without --from-env, the environment is not read at all
    r = inst.install("--stdout-sink", SE_INSTALL_PACKAGE="/nonexistent.whl")
    assert r.returncode == 2 and "give --package" in r.stderr, out(r)


@pytest.fixture
def blob(sim, wheel, azure_lock):
    b = BlobStandIn(
        sim.token_authority,
        {
            f"/se-forwarder/{wheel.name}": wheel.read_bytes(),
            "/se-forwarder/se_forwarder.lock": azure_lock.read_bytes(),
        },
        forbidden={"/se-forwarder/secret.whl"},
    )
    yield b
    b.close()


def test_run_command_installs_from_blob_storage_with_the_managed_identity(inst, sim, wheel, blob):
    """The Run Command path end to end: the parameters vm-agent.bicep gives the run command
    (shared.bicep's linuxRunCommandParameters), passed the way the handler passes them, make
    install.sh download the wheel and the lock from blob storage with a managed-identity token,
    check both against the lock and the pinned sha256, and install the agent with the DCR's
    streams in its config. Run again with the same values, it reuses the virtualenv."""
    sha = hashlib.sha256(wheel.read_bytes()).hexdigest()
    params = _shared().call(
        "linuxRunCommandParameters",
        _settings(
            packageUri=f"{blob.url}/se-forwarder/{wheel.name}",
            packageSha256=sha,
            lockUri=f"{blob.url}/se-forwarder/se_forwarder.lock",
            logsIngestionEndpoint=f"https://127.0.0.1:{free_port()}",  # nothing listens: warnings
            recordsStream="Custom-MyRecords",
        ),
        "run-1",
    )
    args, env = run_command_invocation(params)
    assert args == ["--from-env"]
    assert env["SE_INSTALL_PACKAGE_SHA256"] == sha and env["SE_INSTALL_PREREQUISITES"] == "yes"
    # the test's own options: a relocated install against the simulator (loopback URLs are not
    # blob host names, so the identity is asked for explicitly)
    r = inst.install(
        *args,
        "--imds-endpoint",
        sim.url,
        "--download-identity",
        "managed",
        "--verify-timeout",
        "120",
        **env,
    )
    assert r.returncode == 0, out(r)
    assert "downloaded with the managed identity" in (inst.opt / "install.log").read_text()
    assert [path for path, auth in blob.requests if auth] == [
        f"/se-forwarder/{wheel.name}",
        "/se-forwarder/se_forwarder.lock",
    ]
    cfg = inst.config.read_text()
    assert 'records_stream = "Custom-MyRecords"' in cfg and 'client_id = ""' in cfg
    assert not list(inst.opt.glob("downloads.*")), "downloads are removed"
    # forceUpdateTag: the run command runs again, unchanged: nothing rebuilt
    r = inst.install(
        *args,
        "--imds-endpoint",
        sim.url,
        "--download-identity",
        "managed",
        "--verify-timeout",
        "120",
        **dict(env, SE_INSTALL_RUN_ID="run-2"),
    )
    assert r.returncode == 0 and "reusing versions/" in r.stdout, out(r)


def test_blob_the_identity_may_not_read(inst, sim, blob):
    r = inst.install(
        "--package",
        f"{blob.url}/se-forwarder/secret.whl",
        "--stdout-sink",
        "--download-identity",
        "managed",
        "--imds-endpoint",
        sim.url,
        "--client-id",
        "",
        timeout=120,
    )
    assert r.returncode == 11, out(r)
    assert "HTTP 403" in r.stderr and "Storage Blob Data Reader" in r.stderr, out(r)
    assert "Bearer" not in r.stdout + r.stderr + (inst.opt / "install.log").read_text()
