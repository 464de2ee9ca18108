#!/usr/bin/env bash
# Set up and run the demo: the whole pipeline on this machine, no Azure account.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh azure,report,collector  # and the test bed, whose command `demo` is
exec .venv/bin/se-forwarder demo "$@"
