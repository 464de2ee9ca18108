#!/usr/bin/env bash
# Create ./.venv and install the two distributions of this repository into it, both editable:
# se-forwarder (the agent, the collector, the report) with the given extras (default: azure) and
# se-forwarder-testbed (testbed/: the simulator, the stand-ins, the demo; its commands reach
# `se-forwarder` through the se_forwarder.commands entry points).
# Works on a fresh Debian 12 with Python 3.11: installs python3-venv when the venv module is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
extras="${1:-azure}"
PY="${PYTHON:-python3}"
if ! "$PY" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
  echo "se-forwarder needs Python 3.11 or newer ($PY is $("$PY" --version 2>&1 || echo missing))" >&2
  exit 1
fi
if [ ! -x .venv/bin/python ]; then
  if ! "$PY" -m venv .venv 2>/dev/null; then
    rm -rf .venv
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
      echo "installing python3-venv" >&2
      apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null
      "$PY" -m venv .venv
    else
      echo "cannot create a virtualenv: install python3-venv (sudo apt-get install python3-venv)" >&2
      exit 1
    fi
  fi
fi
.venv/bin/python -m pip install -q --disable-pip-version-check --upgrade pip
.venv/bin/python -m pip install -q --disable-pip-version-check -e ".[${extras}]" -e ./testbed
