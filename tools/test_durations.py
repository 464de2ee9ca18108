#!/usr/bin/env python3
"""tests/durations.json from a run's JUnit XML: seconds per test module, what the suite's
collection hook orders modules by (longest first), so the parallel run's last minutes are not one
worker finishing a long module alone.

    .venv/bin/python -m pytest -q -n 4 --dist loadfile --junitxml=/tmp/run.xml
    .venv/bin/python tools/test_durations.py /tmp/run.xml
    .venv/bin/python tools/test_durations.py .ci/last-run.xml   # after .ci/run (with its lanes)

Stale figures only change the order the modules start in, never what runs; a module missing from
the file starts after the ones listed.
"""

from __future__ import annotations

import argparse
import json
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "tests" / "durations.json"


def module_seconds(junit: Path) -> dict[str, float]:
    """Seconds per module path (setup, call and teardown of its tests, as JUnit reports them)."""
    seconds: Counter[str] = Counter()
    for case in ET.parse(junit).getroot().iter("testcase"):
        file = case.get("file")
        if not file:  # pytest's xunit2 has no file attribute: the class name holds the module
            parts = (case.get("classname") or "").split(".")
            while parts and parts[-1][:1].isupper():
                parts.pop()  # a test class
            file = "/".join(parts) + ".py"
        seconds[file] += float(case.get("time") or 0)
    return {f: round(s, 1) for f, s in seconds.most_common()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("junit", type=Path)
    args = ap.parse_args()
    got = module_seconds(args.junit)
    OUT.write_text(json.dumps(got, indent=1) + "\n")
    print(f"{OUT.relative_to(REPO)}: {len(got)} modules, {sum(got.values()):,.0f} s in all")


if __name__ == "__main__":
    main()
