#!/usr/bin/env python3
"""Write the fleet view's shared definitions into every query that uses them.

One home per definition: ``dashboards/definitions/<name>.kql`` (alive, stopped, silent and gone;
open; hardware failure). Log alert rules, workbook items and the paste-able library must each be
one self-contained query (an alert rule's query is loaded as text, a workbook query is a JSON
string, a library query is pasted), so the definition's text is copied into each query that uses
it, between two marker lines:

    // ---- vm-state: dashboards/definitions/vm-state.kql (python tools/build_definitions.py) ----
    ...written by this script...
    // ---- end of vm-state ----

The query defines the definition's inputs before the block (its own time range and filters) and
reads its outputs after it; the definition file's leading ``//`` lines say which. The header of a
definition file is not copied (it keeps the workbooks lean).

    python tools/build_definitions.py          # rewrite the blocks, then the workbook JSON
    python tools/build_definitions.py --check  # exit 1 naming the stale files

Standard library only.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DASHBOARDS = ROOT / "dashboards"
DEFINITIONS = DASHBOARDS / "definitions"
QUERIES = DASHBOARDS / "queries"

_BLOCK = re.compile(
    r"^(?P<indent>[ \t]*)// ---- (?P<name>[a-z0-9-]+): dashboards/definitions/(?P=name)\.kql"
    r" \(python tools/build_definitions\.py\) ----\n"
    r"(?P<body>.*?)"
    r"^(?P=indent)// ---- end of (?P=name) ----$",
    re.DOTALL | re.MULTILINE,
)


def begin_marker(name: str) -> str:
    return (
        f"// ---- {name}: dashboards/definitions/{name}.kql "
        "(python tools/build_definitions.py) ----"
    )


def definitions(folder: Path = DEFINITIONS) -> dict[str, str]:
    """Body of every definition (its text after the leading ``//`` header lines)."""
    out = {}
    for f in sorted(folder.glob("*.kql")):
        lines = f.read_text("utf-8").splitlines()
        k = 0
        while k < len(lines) and lines[k].startswith("//"):
            k += 1
        out[f.stem] = "\n".join(lines[k:]).strip("\n") + "\n"
    return out


def uses(text: str) -> list[str]:
    """Names of the definitions a query's blocks hold, in order."""
    return [m.group("name") for m in _BLOCK.finditer(text)]


def render(text: str, defs: dict[str, str]) -> str:
    """``text`` with every block's body replaced by its definition."""

    def fill(m: re.Match) -> str:
        name = m.group("name")
        if name not in defs:
            raise KeyError(f"no definition {name!r} in {DEFINITIONS}")
        indent = m.group("indent")
        return f"{indent}{begin_marker(name)}\n{defs[name]}{indent}// ---- end of {name} ----"

    return _BLOCK.sub(fill, text)


def query_files(folder: Path = QUERIES) -> list[Path]:
    return sorted(folder.rglob("*.kql"))


def stale(folder: Path = QUERIES, defs: dict[str, str] | None = None) -> list[tuple[Path, str]]:
    """(file, up-to-date text) for every query file whose blocks differ from the definitions."""
    defs = definitions() if defs is None else defs
    out = []
    for f in query_files(folder):
        text = f.read_text("utf-8")
        new = render(text, defs)
        if new != text:
            out.append((f, new))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="fail if a query's blocks are stale")
    args = ap.parse_args(argv)
    todo = stale()
    if args.check:
        for f, _ in todo:
            print(f"{f.relative_to(ROOT)} is stale")
        if todo:
            print("run `python tools/build_definitions.py` and commit the result")
            return 1
        print(f"definitions up to date ({len(query_files())} queries checked)")
        return 0
    for f, text in todo:
        f.write_text(text, "utf-8", newline="\n")
        print(f"updated {f.relative_to(ROOT)}")
    return subprocess.call([sys.executable, str(ROOT / "tools" / "build_workbooks.py")])


if __name__ == "__main__":
    sys.exit(main())
