#!/usr/bin/env bash
# Set up and run the full test suite. Installs what the tests need: the Python dev extras, the
# Kusto language service and Azurite (npm, for KQL checks and the collector's checkpoints) and, as root, Debian's cloud-init and systemd
# (for `cloud-init schema` and `systemd-analyze`) and chromium (the report's screenshot test).
#   --install-only  the installs alone (.ci/run, which then lints while the suite runs)
#   --no-install    the suite alone, on what an earlier --install-only installed
set -euo pipefail
cd "$(dirname "$0")/.."
install=1 suite=1
case "${1:-}" in
  --install-only) suite=0; shift ;;
  --no-install) install=0; shift ;;
esac
install_deps() {
  need=()
  command -v cloud-init >/dev/null || need+=(cloud-init)
  command -v systemd-analyze >/dev/null || need+=(systemd)
  command -v node >/dev/null || need+=(nodejs npm)
  command -v chromium >/dev/null || need+=(chromium)
  if [ "${#need[@]}" -gt 0 ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
      echo "installing ${need[*]}" >&2
      apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
    else
      echo "missing ${need[*]}: install them (sudo apt-get install ${need[*]}), the tests that need them will fail" >&2
    fi
  fi
  npm_jobs=()  # npm installs while pip does: setup is a share of a fresh clone's CI time
  for tool in tools/kql tools/azurite; do  # the KQL language service; Azurite (checkpoints)
    if [ -f "$tool/package-lock.json" ] && command -v npm >/dev/null; then
      npm ci --prefix "$tool" --no-audit --no-fund --loglevel=error &
      npm_jobs+=("$!")
    fi
  done
  bash scripts/setup.sh dev
  for job in "${npm_jobs[@]}"; do
    wait "$job"
  done
}
if [ "$install" = 1 ]; then install_deps; fi
[ "$suite" = 1 ] || exit 0
# In parallel (pytest-xdist) unless the arguments choose (-n N, -p no:xdist): two workers per
# core, as many tests wait on real time (agent processes, scenario time, the stand-ins) and a
# second worker runs while one waits (2 cores: 429 s with 2 workers, 327 s with 4, same tests);
# loadfile keeps a module on one worker: its module-scoped builds and servers are made once
# (not loadgroup: with pytest 9.2 it silently stops grouping, pytest-dev/pytest-xdist#1386);
# modules start in the order tests/conftest.py gives them, longest first (tests/durations.json),
# not xdist's (most tests first), which left the long modules with few tests for the end.
cores="$(nproc 2>/dev/null || echo 2)"
parallel=(-n "$((2 * cores))" --dist loadfile --no-loadscope-reorder)
for arg in "$@"; do
  case "$arg" in -n|-n[0-9]*|-nauto|--numprocesses*|no:xdist|-pno:xdist) parallel=() ;; esac
done
exec .venv/bin/python -m pytest "${parallel[@]}" "$@"
