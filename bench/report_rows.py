#!/usr/bin/env python3
"""Every item's rows of the report, built by this tree and by another commit over the same files,
compared one for one: a change to the report's engine or to its queries must leave its results
as they were (or differ only where it meant to).

    .venv/bin/python bench/report_rows.py --data /tmp/fleet1k --before main
    .venv/bin/python bench/report_rows.py --data DIR --before HEAD~1 --keep /tmp/rows

``--data`` is a fleet written by ``bench/report_speed.py --keep`` (records.jsonl,
heartbeats.jsonl, meta.json). Each tree builds the report in a process of its own, with its own
``src`` and ``dashboards`` (the other commit's exported with ``git archive``, as report_speed.py
does for its baseline); every item's rows (drill-downs included, per value) are written as JSON
and compared: equal in order,
equal as a multiset (the item has no order, or ties in its order), or different (the first
difference printed). Exit 1 when any item differs. Also prints each build's time and CPU time.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from support import gittree

REPO = Path(__file__).resolve().parents[1]

#: the child: the report's results as JSON (rows by workbook, item and drill-down value)
DRIVER = r"""
import json, os, sys, time
from datetime import datetime
from pathlib import Path
import se_forwarder
from se_forwarder.report import build, sources
data, dash, end, out = sys.argv[1:5]
t0, c0 = time.perf_counter(), time.process_time()
rows = sources.read_paths([Path(data) / "records.jsonl", Path(data) / "heartbeats.jsonl"])
built = build.build(rows, Path(dash), now=datetime.fromisoformat(end))
items = {}
for key, res in built.results.items():
    for name, r in res.items():
        items[f"{key}/{name}"] = {"rows": r.rows, "error": r.error, "seconds": r.seconds,
                                  "drill": {v: d.rows for v, d in r.drill.items()}}
Path(out).write_text(json.dumps({"module": se_forwarder.__file__, "items": items,
                                 "seconds": time.perf_counter() - t0,
                                 "cpu": time.process_time() - c0}, default=str))
"""


def build(src: Path, dashboards: Path, data: Path, end: str, out: Path) -> dict:
    subprocess.run(
        [sys.executable, "-c", DRIVER, str(data), str(dashboards), end, str(out)],
        env={"PYTHONPATH": str(src), "PATH": "/usr/bin:/bin"},
        check=True,
    )
    got = json.loads(out.read_text())
    if not got["module"].startswith(str(src)):
        raise SystemExit(f"the child imported {got['module']}, not the tree under {src}")
    return got


def _key(row: dict) -> str:
    return json.dumps(row, sort_keys=True, default=str)


def compare(a: list[dict], b: list[dict]) -> str | None:
    """None when equal in order; 'multiset' when equal in another order; else the difference."""
    if a == b:
        return None
    if Counter(map(_key, a)) == Counter(map(_key, b)):
        return "multiset"
    if len(a) != len(b):
        return f"{len(a)} rows before, {len(b)} after"
    only = sorted(set(map(_key, a)) - set(map(_key, b)))
    return f"rows differ, e.g. before: {only[0][:300]}" if only else "rows differ"


def main(argv: list[str] | None = None) -> int:
    os.environ.pop("SE_FORWARDER_KQL_CACHE", None)  # measured cold: no translation read from disk
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, required=True)
    ap.add_argument("--before", default="main", help="the commit to compare with")
    ap.add_argument("--keep", type=Path, help="keep both results' JSON in this folder")
    args = ap.parse_args(argv)
    end = json.loads((args.data / "meta.json").read_text())["end"]
    with tempfile.TemporaryDirectory(prefix="se-report-rows-") as tmp:
        out = args.keep or Path(tmp)
        out.mkdir(parents=True, exist_ok=True)
        tree = gittree.export(args.before, Path(tmp) / "before", "src", "dashboards")
        before = build(tree / "src", tree / "dashboards", args.data, end, out / "before.json")
        after = build(REPO / "src", REPO / "dashboards", args.data, end, out / "after.json")
    bad = 0
    print(f"{'item':<48} {'before s':>9} {'after s':>9}  rows")
    for name in sorted(set(before["items"]) | set(after["items"])):
        b, a = before["items"].get(name), after["items"].get(name)
        if a is None or b is None:
            print(f"{name:<48} only {'after' if b is None else 'before'}")
            bad += 1
            continue
        diffs = (
            [compare(b["rows"], a["rows"])]
            if b["error"] == a["error"]
            else [f"error before: {b['error']}, after: {a['error']}"]
        )
        diffs += [
            f"drill {v}: {compare(b['drill'].get(v, []), a['drill'].get(v, []))}"
            for v in set(b["drill"]) | set(a["drill"])
            if compare(b["drill"].get(v, []), a["drill"].get(v, []))
        ]
        state = "; ".join(d for d in diffs if d) or f"{len(a['rows']):,} identical"
        bad += any(d and d != "multiset" for d in diffs)
        print(f"{name:<48} {b['seconds']:9.2f} {a['seconds']:9.2f}  {state}")
    print(
        f"report built: before {before['seconds']:.1f} s ({before['cpu']:.1f} s CPU in its "
        f"process), after {after['seconds']:.1f} s ({after['cpu']:.1f} s CPU)"
    )
    print("every item identical" if not bad else f"{bad} item(s) differ")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
