#!/usr/bin/env python3
"""Fill the workbooks' KQL from dashboards/queries/workbook/ (the one home of every workbook query).

The workbook format cannot reference files, so the query text is copied into the JSON by this
script. Mapping (``<workbook>`` is the file name without ``.workbook.json``):

* a query item (Log Analytics or Azure Resource Graph) named ``<name>``
  -> ``dashboards/queries/workbook/<workbook>/<name>.kql``
* a query-backed parameter named ``<Name>``
  -> ``dashboards/queries/workbook/<workbook>/parameters/<Name>.kql``

Merge items (``queryType`` 7) hold JSON, not KQL: they stay in the workbook.

Each ``.kql`` file starts with a header of ``//`` lines and one blank line. The header documents
the file and is not copied into the workbook (it keeps the workbook lean; Bicep loads it with
loadJsonContent, at most 1 MB). Everything after the blank line is the query,
copied verbatim (without the final newline); ``{Param}`` placeholders are workbook parameters.

    python tools/build_workbooks.py            # rewrite the workbook JSON in place
    python tools/build_workbooks.py --check    # exit 1 (with a summary) if the JSON is stale
    python tools/build_workbooks.py --extract  # create missing .kql files from the JSON (once,
                                               # e.g. after adding an item in the portal)

Standard library only.
"""

from __future__ import annotations

import argparse
import difflib
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DASHBOARDS = REPO / "dashboards"
SOURCES = DASHBOARDS / "queries" / "workbook"

LOG_ANALYTICS, RESOURCE_GRAPH = 0, 1
KQL_QUERY_TYPES = {LOG_ANALYTICS: "Log Analytics", RESOURCE_GRAPH: "Azure Resource Graph"}
_SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)(?::[A-Za-z]+)?\}")


class SourceError(ValueError):
    """A .kql file is missing or malformed, or a workbook item cannot be mapped to a file."""


@dataclass
class Slot:
    """One KQL query of a workbook and the file it comes from."""

    workbook: Path
    where: str  # JSON path, e.g. items[2].content.items[0] or items[1].content.parameters[2]
    name: str  # item name, or "parameter <Name>"
    kind: str  # "item" or "parameter"
    query_type: int
    file: Path
    holder: dict  # the dict whose "query" the file fills


def workbook_key(path: Path) -> str:
    return path.name.removesuffix(".workbook.json")


def workbook_paths(dashboards: Path = DASHBOARDS) -> list[Path]:
    return sorted(dashboards.glob("*.workbook.json"))


def _walk(items: list, prefix: str = "items"):
    for i, item in enumerate(items):
        p = f"{prefix}[{i}]"
        yield p, item
        if item.get("type") == 12:
            yield from _walk(item.get("content", {}).get("items", []), f"{p}.content.items")


def _checked_name(name, where: str) -> str:
    if not isinstance(name, str) or not _SAFE_NAME.match(name):
        raise SourceError(f"{where}: name {name!r} cannot be a file name")
    return name


def slots(wb: dict, path: Path, sources: Path = SOURCES) -> list[Slot]:
    """Every KQL query of the workbook with its source file (which may not exist yet)."""
    folder = sources / workbook_key(path)
    out = []
    for where, item in _walk(wb["items"]):
        c = item.get("content", {})
        if item.get("type") == 3 and "query" in c and c.get("queryType", 0) in KQL_QUERY_TYPES:
            name = _checked_name(item.get("name"), f"{path.name}#{where}")
            out.append(
                Slot(path, where, name, "item", c.get("queryType", 0), folder / f"{name}.kql", c)
            )
        elif item.get("type") == 9:
            for j, prm in enumerate(c.get("parameters", [])):
                if "query" in prm and prm.get("queryType", 0) in KQL_QUERY_TYPES:
                    w = f"{where}.content.parameters[{j}]"
                    name = _checked_name(prm.get("name"), f"{path.name}#{w}")
                    out.append(
                        Slot(
                            path,
                            w,
                            f"parameter {name}",
                            "parameter",
                            prm.get("queryType", 0),
                            folder / "parameters" / f"{name}.kql",
                            prm,
                        )
                    )
    files = [s.file for s in out]
    dupes = sorted({f.name for f in files if files.count(f) > 1})
    if dupes:
        raise SourceError(f"{path.name}: two queries map to the same file: {dupes}")
    return out


def split_source(text: str, name: str = "<kql>") -> tuple[str, str]:
    """(header, query) of a .kql file: a block of // lines, one blank line, then the query."""
    lines = text.split("\n")
    i = 0
    while i < len(lines) and lines[i].lstrip().startswith("//"):
        i += 1
    if i == 0 or i >= len(lines) or lines[i].strip() != "":
        raise SourceError(
            f"{name}: start with a // comment header and one blank line before the query"
        )
    query = "\n".join(lines[i + 1 :]).rstrip("\n")
    if not query.strip():
        raise SourceError(f"{name}: no query after the header")
    return "\n".join(lines[:i]), query


def query_of(file: Path) -> str:
    """The text a workbook gets from a .kql file (read with universal newlines: CRLF is fine)."""
    return split_source(file.read_text("utf-8"), _display(file))[1]


def render(wb: dict) -> str:
    return json.dumps(wb, indent=2, ensure_ascii=False) + "\n"


def _display(p: Path) -> str:
    try:
        return p.relative_to(REPO).as_posix()
    except ValueError:
        return str(p)


@dataclass
class Built:
    path: Path
    current: str
    generated: str
    changed: list[str]  # names of the queries whose text changed


def build(path: Path, sources: Path = SOURCES) -> Built:
    """The workbook JSON as the .kql files make it. Raises SourceError for a missing file."""
    current = path.read_text("utf-8")
    wb = json.loads(current)
    missing, changed = [], []
    for s in slots(wb, path, sources):
        if not s.file.is_file():
            missing.append(_display(s.file))
            continue
        text = query_of(s.file)
        if s.holder["query"] != text:
            changed.append(s.name)
            s.holder["query"] = text
    if missing:
        raise SourceError(
            f"{path.name}: no source file for {len(missing)} queries: {', '.join(missing)} "
            "(create them, or run with --extract to take them from the JSON)"
        )
    return Built(path, current, render(wb), changed)


def orphans(paths: list[Path], sources: Path = SOURCES) -> list[Path]:
    """.kql files under sources/ that no workbook query uses."""
    used = {s.file for p in paths for s in slots(json.loads(p.read_text("utf-8")), p, sources)}
    return sorted(f for f in sources.rglob("*.kql") if f not in used)


def _header(s: Slot) -> str:
    what = "parameter" if s.kind == "parameter" else "item"
    short = s.name.removeprefix("parameter ")
    if s.kind == "parameter":
        label = s.holder.get("label", short)
        title = f'The choices of the workbook parameter {short} ("{label}" drop-down).'
    else:
        title = s.holder.get("title") or short
    title = _PLACEHOLDER.sub(lambda m: m.group(1), title)  # no stray placeholders in comments
    return (
        f"// {title}\n"
        f"// Workbook {s.workbook.name}, {what} `{short}` ({KQL_QUERY_TYPES[s.query_type]}).\n"
        "// Edit here, then run `python tools/build_workbooks.py` (see dashboards/README.md).\n"
    )


def extract(paths: list[Path], sources: Path = SOURCES) -> list[Path]:
    """Write a .kql file for every query that has none yet (never overwrites)."""
    written = []
    for p in paths:
        for s in slots(json.loads(p.read_text("utf-8")), p, sources):
            if s.file.exists():
                continue
            s.file.parent.mkdir(parents=True, exist_ok=True)
            s.file.write_text(_header(s) + "\n" + s.holder["query"] + "\n", "utf-8", newline="\n")
            written.append(s.file)
    return written


def main(
    argv: list[str] | None = None, dashboards: Path = DASHBOARDS, sources: Path = SOURCES
) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--check", action="store_true", help="fail if the JSON is not up to date")
    mode.add_argument("--extract", action="store_true", help="create missing .kql files")
    args = ap.parse_args(argv)
    paths = workbook_paths(dashboards)
    if not paths:
        print(f"no *.workbook.json under {dashboards}", file=sys.stderr)
        return 2
    try:
        if args.extract:
            for f in extract(paths, sources):
                print(f"wrote {_display(f)}")
            return 0
        built = [build(p, sources) for p in paths]
        unused = orphans(paths, sources)
    except SourceError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if unused:
        print(
            "error: .kql files no workbook query uses (rename to match an item, or delete): "
            + ", ".join(_display(f) for f in unused),
            file=sys.stderr,
        )
        return 2
    stale = [b for b in built if b.generated != b.current]
    if args.check:
        if not stale:
            print(f"workbooks up to date ({len(built)} checked)")
            return 0
        for b in stale:
            name = _display(b.path)
            what = ", ".join(b.changed) if b.changed else "formatting only"
            print(f"{name} is stale; queries that differ from their .kql: {what}")
            diff = list(
                difflib.unified_diff(
                    b.current.splitlines(),
                    b.generated.splitlines(),
                    f"{name} (committed)",
                    f"{name} (from .kql)",
                    n=0,
                    lineterm="",
                )
            )
            print(
                "\n".join(diff[:40])
                + (f"\n... {len(diff) - 40} more diff lines" if len(diff) > 40 else "")
            )
        print("run `python tools/build_workbooks.py` and commit the result")
        return 1
    for b in stale:
        with open(b.path, "w", encoding="utf-8", newline="\n") as f:
            f.write(b.generated)
        print(f"updated {_display(b.path)}" + (f" ({', '.join(b.changed)})" if b.changed else ""))
    if not stale:
        print("workbooks already up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())
