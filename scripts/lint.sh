#!/usr/bin/env bash
# The checks that keep the house, as CI runs them (.ci/run) and pre-commit calls them: ruff's
# rules, ruff's formatter (check only) and mypy (strict, configured in pyproject.toml). Uses ./.venv
# (scripts/setup.sh dev makes it). Exit status: non-zero when any check fails; all three run.
set -uo pipefail
cd "$(dirname "$0")/.."
py=.venv/bin/python
status=0
"$py" -m ruff check --no-cache . || status=1
"$py" -m ruff format --check --no-cache . || status=1
if "$py" -c 'import mypy' 2>/dev/null; then
  "$py" -m mypy || status=1
else
  echo "lint: mypy is not installed (scripts/setup.sh dev installs it)" >&2
  status=1
fi
exit "$status"
