"""The report's sub-packages depend one way: ``kql`` (the engine) knows no workbook and no page,
``workbooks`` (the plan and its execution) no page; ``render`` reads both; ``build`` and
``sources`` at the root tie them together."""

from __future__ import annotations

import ast

from helpers import REPO

REPORT = REPO / "src" / "se_forwarder" / "report"
#: each sub-package and the sub-packages it must not import
BELOW = {"kql": {"workbooks", "render"}, "workbooks": {"render"}, "render": set()}


def imported_subpackages(source: str, here: str) -> set[str]:
    """The report sub-packages a module of sub-package ``here`` imports, however it says so."""
    names: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level == 1:  # from .x import y: its own sub-package
                names.append(here)
            elif node.level == 2:  # from ..x import y, from .. import x: report.x
                names += [module] if module else [a.name for a in node.names]
            elif node.level == 0 and module.startswith("se_forwarder.report."):
                names.append(module.removeprefix("se_forwarder.report."))
            elif node.level == 0 and module == "se_forwarder.report":
                names += [a.name for a in node.names]
        elif isinstance(node, ast.Import):
            names += [
                a.name.removeprefix("se_forwarder.report.")
                for a in node.names
                if a.name.startswith("se_forwarder.report.")
            ]
    return {n.split(".")[0] for n in names} & BELOW.keys()


def test_the_report_sub_packages_depend_one_way():
    upward = {}
    for sub, below in BELOW.items():
        for path in sorted((REPORT / sub).rglob("*.py")):
            wrong = imported_subpackages(path.read_text("utf-8"), sub) & below
            if wrong:
                upward[str(path.relative_to(REPO))] = sorted(wrong)
    assert upward == {}


def test_an_import_up_is_seen():
    """The check itself, on each way of writing the import."""
    for line in (
        "from ..render.values import fmt",
        "from .. import render",
        "from se_forwarder.report.render import values",
        "import se_forwarder.report.render.values",
    ):
        assert imported_subpackages(line, "workbooks") == {"render"}, line
    assert imported_subpackages("from .order import sort_rows", "workbooks") == {"workbooks"}
