"""infra/scripts/teardown.sh: the teardown steps a deleted resource group leaves undone, run
against a stand-in ``az`` on PATH that records each call and answers the reading ones as the CLI
does (``-o tsv``), so what is deleted, and in which order, is checked without an account."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from helpers.infra.paths import INFRA

SCRIPT = INFRA / "scripts" / "teardown.sh"
PRINCIPAL = "c0c0c0c0-0000-4000-8000-000000000001"
KEPT = "a1a1a1a1-0000-4000-8000-000000000002"
GONE = "b2b2b2b2-0000-4000-8000-000000000003"
SUBSCRIPTION_READER = (
    "/subscriptions/s/providers/Microsoft.Authorization/roleAssignments/11111111-reader"
)
RULE = "/subscriptions/s/resourceGroups/g/providers/Microsoft.Insights/dataCollectionRules/r"
HUB = "/subscriptions/s/resourceGroups/g/providers/Microsoft.EventHub/namespaces/n/eventhubs/h"
PUBLISHER = "3913510d-42f4-4e42-8a64-420c390055eb"
SENDER = "2b629674-e913-4c01-ae53-ef4638d8f975"

# Answers: the identity's principal id; its assignments (--all); per scope and role, rows of
# "<assignment id>\t<principal id>" for a kept and a removed principal.
AZ = r"""#!/usr/bin/env bash
echo "$*" >> "$AZ_LOG"
case "$*" in
  "identity show"*) echo "$AZ_PRINCIPAL" ;;
  "role assignment list --assignee-object-id"*)
    printf '%s\n' "$AZ_SUB_READER" \
      "$AZ_RULE/providers/Microsoft.Authorization/roleAssignments/p1" ;;
  "role assignment list --scope"*)
    scope=$5; role=$7
    printf '%s\t%s\n' "$scope/ra-$role-kept" "$AZ_KEPT" "$scope/ra-$role-gone" "$AZ_GONE" ;;
esac
"""


def _run(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess, list[str]]:
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    (bindir / "az").write_text(AZ)
    (bindir / "az").chmod(0o755)
    log = tmp_path / "az.log"
    log.write_text("")
    env = dict(
        os.environ,
        PATH=f"{bindir}:{os.environ['PATH']}",
        AZ_LOG=str(log),
        AZ_PRINCIPAL=PRINCIPAL,
        AZ_KEPT=KEPT,
        AZ_GONE=GONE,
        AZ_SUB_READER=SUBSCRIPTION_READER,
        AZ_RULE=RULE,
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


def test_collector_assignments_go_by_principal_before_the_identity(tmp_path):
    done, calls = _run(
        tmp_path,
        "collector",
        "-g",
        "collector-rg",
        "--identity",
        "se-collector",
        "--subscription",
        "s",
    )
    assert done.returncode == 0, done.stderr
    assert (
        calls[0] == "identity show -g collector-rg -n se-collector --subscription s"
        " --query principalId -o tsv"
    )
    # every scope (--all), so the subscription's Reader is among them
    assert calls[1].startswith(f"role assignment list --assignee-object-id {PRINCIPAL} --all")
    deletes = [c for c in calls if c.startswith("role assignment delete")]
    assert deletes == [
        f"role assignment delete --ids {SUBSCRIPTION_READER} --subscription s --output none",
        f"role assignment delete --ids {RULE}/providers/Microsoft.Authorization/roleAssignments/p1"
        " --subscription s --output none",
    ]
    # the identity last: deleted first, its assignments would be orphans nobody can find by it
    assert calls[-1] == "identity delete -g collector-rg -n se-collector --subscription s"
    assert calls.index(calls[-1]) > max(calls.index(d) for d in deletes)


def test_collector_without_an_identity_deletes_nothing(tmp_path):
    done, calls = _run(tmp_path, "collector", "-g", "rg")
    assert done.returncode == 2 and "--identity" in done.stderr and calls == []


def test_prune_removes_only_principals_no_longer_kept(tmp_path):
    done, calls = _run(tmp_path, "prune", "--scope", RULE, "--scope", HUB, "--keep", KEPT.upper())
    assert done.returncode == 0, done.stderr
    listed = [c for c in calls if c.startswith("role assignment list")]
    assert listed == [
        f"role assignment list --scope {scope} --role {role} --query [].[id, principalId] -o tsv"
        for scope in (RULE, HUB)
        for role in (PUBLISHER, SENDER)
    ]
    deletes = [c.split()[4] for c in calls if c.startswith("role assignment delete")]
    assert deletes == [f"{s}/ra-{r}-gone" for s in (RULE, HUB) for r in (PUBLISHER, SENDER)]
    assert f"principal {GONE} is not kept" in done.stderr


def test_prune_needs_the_kept_list(tmp_path):
    done, calls = _run(tmp_path, "prune", "--scope", RULE)
    assert done.returncode == 2 and "--keep" in done.stderr and calls == []


def test_prune_dry_run_reads_but_deletes_nothing(tmp_path):
    done, calls = _run(tmp_path, "prune", "--scope", RULE, "--keep", KEPT, "--dry-run")
    assert done.returncode == 0, done.stderr
    assert calls and all(c.startswith("role assignment list") for c in calls)
    assert f"would run: az role assignment delete --ids {RULE}/ra-{PUBLISHER}-gone" in done.stdout
    assert "-kept" not in done.stdout


def test_workspace_warns_of_soft_delete_and_purges_only_with_force(tmp_path):
    done, calls = _run(tmp_path, "workspace", "-g", "rg", "-n", "se-logs")
    assert done.returncode == 0, done.stderr
    assert "soft-deleted for 14 days" in done.stderr and "--force" in done.stderr
    assert calls == ["monitor log-analytics workspace delete -g rg -n se-logs --yes"]

    done, calls = _run(tmp_path, "workspace", "-g", "rg", "-n", "se-logs", "--force")
    assert done.returncode == 0, done.stderr
    assert calls == ["monitor log-analytics workspace delete -g rg -n se-logs --force --yes"]
    assert "for good" in done.stderr
