"""infra/scripts/collector-prerequisites.sh: Microsoft's preview prerequisites of the collector's
stage done, not only named. Run against a stand-in ``az`` on PATH that records each call and
answers as the CLI does (a feature Registering, then Registered; the role's id; the service
principal's object id), so what the script asks Azure for is checked without an account."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from helpers.infra.paths import INFRA

SCRIPT = INFRA / "scripts" / "collector-prerequisites.sh"
ROLE_ID = "0f0e0d0c-0b0a-4000-8000-000000000001"
SP_ID = "5a5a5a5a-0000-4000-8000-000000000002"

AZ = r"""#!/usr/bin/env bash
echo "$*" >> "$AZ_LOG"
case "$*" in
  "feature show"*)
    n=$(grep -c "^feature show" "$AZ_LOG")
    if [ "$n" -le 1 ]; then echo Registering; else echo Registered; fi ;;
  "role definition list"*) echo "${AZ_ROLE-}" ;;
  "ad sp show"*) echo "${AZ_SP-}" ;;
esac
"""


def _run(
    tmp_path: Path, *args: str, role=ROLE_ID, sp=SP_ID
) -> tuple[subprocess.CompletedProcess, list[str]]:
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    (bindir / "az").write_text(AZ)
    (bindir / "az").chmod(0o755)
    (bindir / "sleep").write_text("#!/bin/sh\nexit 0\n")
    (bindir / "sleep").chmod(0o755)
    log = tmp_path / "az.log"
    log.write_text("")
    env = dict(
        os.environ, PATH=f"{bindir}:{os.environ['PATH']}", AZ_LOG=str(log), AZ_ROLE=role, AZ_SP=sp
    )
    done = subprocess.run(
        ["bash", str(SCRIPT), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    return done, log.read_text().splitlines()


def test_registers_the_preview_features_and_prints_the_ids(tmp_path):
    done, calls = _run(tmp_path, "--subscription", "sub-1")
    assert done.returncode == 0, done.stderr
    assert (
        "feature register --namespace Microsoft.Compute --name SendScheduledEventsPolicy "
        "--subscription sub-1 --output none" in calls
    )
    assert (
        "feature register --namespace Microsoft.Maintenance --name ScheduledEventsActivity "
        "--subscription sub-1 --output none" in calls
    )
    # waited until Registered before registering the providers again
    first_provider = next(i for i, c in enumerate(calls) if c.startswith("provider register"))
    assert max(i for i, c in enumerate(calls) if c.startswith("feature show")) < first_provider
    registered = {c.split()[3] for c in calls if c.startswith("provider register")}
    assert {
        "Microsoft.Compute",
        "Microsoft.Maintenance",
        "Microsoft.EventGrid",
        "Microsoft.ResourceNotifications",
    } <= registered
    assert any(c.startswith("ad sp show --id 78315a30-673a-4a46-8e5c-ce59dbc6adf8") for c in calls)
    assert (
        done.stdout.strip()
        == f"scheduledEventContributorRoleId={ROLE_ID} maintenanceProviderPrincipalId={SP_ID}"
    )


@pytest.mark.parametrize(
    "role,sp,said", [("", SP_ID, "Scheduled Event Contributor"), (ROLE_ID, "", "service principal")]
)
def test_a_missing_role_or_principal_is_said_not_printed_empty(tmp_path, role, sp, said):
    done, _ = _run(tmp_path, role=role, sp=sp)
    assert done.returncode == 1 and said in done.stderr
    assert "RoleId=" not in done.stdout


def test_dry_run_changes_nothing(tmp_path):
    done, calls = _run(tmp_path, "--dry-run")
    assert done.returncode == 0 and calls == []
    assert (
        "would run: az feature register --namespace Microsoft.Compute --name "
        "SendScheduledEventsPolicy" in done.stdout
    )
