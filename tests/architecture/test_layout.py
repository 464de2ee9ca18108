"""The house rules of src/, each held here: sizes, no private attribute of a third-party package,
contract names from contract.json only, one backoff, no repeated code (the import graph:
``test_imports.py``)."""

from __future__ import annotations

import ast
import hashlib
import io
import re
import sys
import tokenize
from collections import defaultdict
from functools import cache
from pathlib import Path

import pytest
from helpers import REPO

# package -> the folder it sits in: the agent's distribution, the test bed's (testbed/)
ROOTS = {"se_forwarder": REPO / "src", "se_forwarder_testbed": REPO / "testbed" / "src"}
PACKAGES = tuple(ROOTS)
# Sizes count logical lines (statements, however the formatter wraps them; comments, blank lines
# and docstrings aside), so `ruff format` splitting a call over many lines changes nothing. Before
# the formatter the rules were 400 and 60 physical lines: the largest module then held 282
# logical lines and the longest function 47.
MAX_MODULE_LINES = 300
MAX_FUNCTION_LINES = 50


@cache
def sources() -> dict[str, tuple[Path, ast.Module]]:
    """Module name -> (path, tree), for every module of our packages."""
    out = {}
    for pkg, root in ROOTS.items():
        for path in sorted((root / pkg).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = (path, ast.parse(path.read_text("utf-8"), str(path)))
    return out


def rel(path: Path) -> str:
    return str(path.relative_to(REPO))


@cache
def logical_lines(path: Path) -> tuple[tuple[int, str], ...]:
    """(first physical line, text with whitespace folded) of each logical line of code: a
    statement however it is wrapped; comments and blank lines are not code."""
    out: list[tuple[int, str]] = []
    start, words = 0, []
    skip = {tokenize.NL, tokenize.COMMENT, tokenize.INDENT, tokenize.DEDENT, tokenize.ENCODING}
    source = io.StringIO(path.read_text("utf-8")).readline
    for tok in tokenize.generate_tokens(source):
        if tok.type in skip or tok.type == tokenize.ENDMARKER:
            continue
        if tok.type == tokenize.NEWLINE:
            out.append((start, " ".join(words)))
            words = []
            continue
        if not words:
            start = tok.start[0]
        words.append(" ".join(tok.string.split()))
    return tuple(out)


def _docstring_lines(tree: ast.Module) -> set[int]:
    """First lines of the docstrings (module, class, function): text, not code."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            first = node.body[0] if node.body else None
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                out.update([first.lineno] if isinstance(first.value.value, str) else [])
    return out


def _code_lines(path: Path, tree: ast.Module) -> list[int]:
    docs = _docstring_lines(tree)
    return [n for n, _ in logical_lines(path) if n not in docs]


def test_logical_lines_ignore_how_a_statement_is_wrapped(tmp_path):
    one = tmp_path / "one.py"
    one.write_text('"""Doc."""\n\n# note\nx = f(a, b)\n')
    wrapped = tmp_path / "wrapped.py"
    wrapped.write_text('"""Doc."""\n\n# note\nx = f(\n    a,\n    b,\n)\n')
    for path in (one, wrapped):
        assert _code_lines(path, ast.parse(path.read_text())) == [4]
    assert logical_lines(one)[-1][1] == logical_lines(wrapped)[-1][1].replace(", )", ")")


def test_no_module_over_300_logical_lines():
    long = {
        rel(p): n
        for p, tree in sources().values()
        if (n := len(_code_lines(p, tree))) > MAX_MODULE_LINES
    }
    assert long == {}


def test_no_function_over_50_logical_lines():
    long = {}
    for path, tree in sources().values():
        lines = _code_lines(path, tree)
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = sum(1 for line in lines if node.lineno <= line <= node.end_lineno)
                if n > MAX_FUNCTION_LINES:
                    long[f"{rel(path)}:{node.lineno} {node.name}"] = n
    assert long == {}


# -- imports: tests/architecture/test_imports.py ----------------------------------------------

# `se-forwarder report --fleet N` generates a fleet with the test bed (its help says so); the import
# is inside the function that serves that option, never on the agent's path (test_run_path.py).
TEST_BED_ALLOWED = {"se_forwarder.report.sources"}


def test_the_agent_package_does_not_import_the_test_bed():
    offenders = []
    for name, (path, tree) in sources().items():
        if (
            not name.startswith("se_forwarder.") and name != "se_forwarder"
        ) or name in TEST_BED_ALLOWED:
            continue
        for node in ast.walk(tree):
            mod = node.module if isinstance(node, ast.ImportFrom) else None
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if any((m or "").startswith("se_forwarder_testbed") for m in [mod, *names]):
                offenders.append(f"{rel(path)}:{node.lineno}")
    assert offenders == []


# -- third-party internals ------------------------------------------------------------------------


@cache
def _our_private_names() -> set[str]:
    """Every ``_name`` our own code defines (methods, attributes, module globals)."""
    names: set[str] = set()
    for _, tree in sources().values():
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                names.add(node.attr)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                names.add(node.target.id)
    return {n for n in names if n.startswith("_")}


def _private_uses(tree: ast.Module) -> list[tuple[int, str]]:
    ours = _our_private_names()
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            attr = node.attr
            if attr.startswith("_") and not attr.startswith("__") and attr not in ours:
                found.append((node.lineno, ast.unparse(node)))
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            top = node.module.split(".")[0]
            if (
                top not in PACKAGES
                and top != "__future__"
                and any(p.startswith("_") for p in node.module.split("."))
            ):
                found.append((node.lineno, f"from {node.module} import ..."))
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("getattr", "setattr", "hasattr")
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str)
            and node.args[1].value.startswith("_")
            and not node.args[1].value.startswith("__")
            and node.args[1].value not in ours
        ):
            found.append((node.lineno, ast.unparse(node)))
    return found


def test_no_package_or_module_is_named_like_a_standard_library_module():
    """A package named ``platform`` read as the standard library's wherever it was imported
    (``from .. import platform``; issue 19), and a module ``trace`` beside ``import trace``:
    packages and modules say what they hold in names of their own."""
    assert (
        sorted(
            name
            for name in sources()
            if "." in name and name.rsplit(".", 1)[-1] in sys.stdlib_module_names
        )
        == []
    )


def test_no_private_attribute_of_a_third_party_package_is_read_or_written():
    found = [
        f"{rel(p)}:{line}: {text}"
        for p, tree in sources().values()
        for line, text in _private_uses(tree)
    ]
    assert found == []


@pytest.mark.parametrize(
    "code",
    [
        "x = producer._max_message_size_on_link",
        "edb._message[5].append(b'')",
        "getattr(producer, '_max_message_size_on_link', 0)",
        "from azure.eventhub._transport._pyamqp_transport import PyamqpTransport",
    ],
)
def test_the_private_attribute_check_catches_what_it_is_for(code):
    assert _private_uses(ast.parse(code)) != []


# -- contract names ------------------------------------------------------------------------------


def _contract_names() -> set[str]:
    from se_forwarder import contract

    names = set()
    for key, spec in contract.tables().items():
        names |= {key, spec.table, spec.stream, spec.short_name}
    return names


def _string_constants(tree: ast.Module):
    docstrings = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (
            isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
            and body
            and isinstance(body[0], ast.Expr)
            and isinstance(body[0].value, ast.Constant)
        ):
            docstrings.add(id(body[0].value))
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and id(node) not in docstrings
        ):
            yield node


def test_contract_names_come_from_contract_json_only():
    """Table keys, table names, stream names and the Event Hubs table names are written in
    contract.json and read through se_forwarder.contract, nowhere else in the agent."""
    names = _contract_names()
    found = []
    for name, (path, tree) in sources().items():
        if name == "se_forwarder.contract" or not name.startswith("se_forwarder."):
            continue
        found += [
            f"{rel(path)}:{c.lineno}: {c.value!r}"
            for c in _string_constants(tree)
            if c.value in names
        ]
    assert found == []


def test_the_test_bed_names_tables_and_streams_through_the_contract_too():
    from se_forwarder import contract

    names = {n for spec in contract.tables().values() for n in (spec.table, spec.stream)}
    found = [
        f"{rel(p)}:{c.lineno}: {c.value!r}"
        for name, (p, tree) in sources().items()
        if name.startswith("se_forwarder_testbed")
        for c in _string_constants(tree)
        if c.value in names
    ]
    assert found == []


# -- one backoff ---------------------------------------------------------------------------------


def test_one_backoff():
    """Only backoff.py draws random delays; IMDS, approvals, delivery and the sinks use it."""
    users = set()
    for name, (_path, tree) in sources().items():
        if not name.startswith("se_forwarder."):
            continue
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id == "random"
                and node.attr in ("uniform", "random", "expovariate")
            ):
                users.add(name)
    assert users == {"se_forwarder.backoff"}
    from test_imports import imports_of

    for user in (
        "se_forwarder.imds.identity",  # IMDS
        "se_forwarder.approvals.approver",
        "se_forwarder.delivery.worker",
        "se_forwarder.sinks.webhook.sink",  # Retry-After
        "se_forwarder.sinks.log_analytics.sink",
    ):
        assert "se_forwarder.backoff" in {i.target for i in imports_of(user)}


# -- no repeated code ----------------------------------------------------------------------------

WINDOW = 6
_SKIP = re.compile(
    r"^(#|\"\"\"|'''|@|from |import |[)\]}]+,?:?$|pass$|return$|else:$|try:$|"
    r"finally:$|\w+ = \w+$)"
)


def _windows(path: Path) -> list[tuple[str, int]]:
    """Hashes of every run of ``WINDOW`` meaningful logical lines (a statement however it is
    wrapped, whitespace folded, a trailing comma before a closing bracket dropped)."""
    lines = []
    for n, raw in logical_lines(path):
        text = re.sub(r",\s*([)\]}])", r"\1", raw)
        if text and not _SKIP.match(text):
            lines.append((text, n))
    return [
        (
            hashlib.sha1("\n".join(t for t, _ in lines[i : i + WINDOW]).encode()).hexdigest(),
            lines[i][1],
        )
        for i in range(len(lines) - WINDOW + 1)
    ]


def test_no_six_line_run_of_code_is_repeated():
    seen: dict[str, list[str]] = defaultdict(list)
    for path, _ in sources().values():
        for digest, line in _windows(path):
            seen[digest].append(f"{rel(path)}:{line}")
    repeats = sorted(places for places in seen.values() if len(places) > 1)
    assert repeats == []
