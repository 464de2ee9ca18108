"""The checks that keep the house agree wherever they run: the pre-commit hooks install the ruff
the dev extra pins (which scripts/lint.sh and CI use), and the hooks end in scripts/lint.sh."""

from __future__ import annotations

import re
import tomllib

from helpers import REPO

PRE_COMMIT = REPO / ".pre-commit-config.yaml"


def _dev_pins() -> dict[str, str]:
    dev = tomllib.loads((REPO / "pyproject.toml").read_text("utf-8"))["project"][
        "optional-dependencies"
    ]["dev"]
    return dict(m.groups() for d in dev if (m := re.fullmatch(r"([\w-]+)==([\w.]+)", d)))


def test_the_hooks_run_the_ruff_the_dev_extra_pins():
    hooks = re.findall(
        r"additional_dependencies: \[ruff==([\w.]+)\]", PRE_COMMIT.read_text("utf-8")
    )
    assert len(hooks) == 2  # ruff check, ruff format
    assert set(hooks) == {_dev_pins()["ruff"]}


def test_the_hooks_end_in_what_ci_runs():
    config = PRE_COMMIT.read_text("utf-8")
    assert "entry: bash scripts/lint.sh" in config
    assert "bash scripts/lint.sh" in (REPO / ".ci" / "run").read_text("utf-8")
