"""What Azure Resource Manager itself limits or refuses, beyond the resource types: the length of
one template expression, and properties a second deployment may not change.

Both are facts of the service, not of Bicep: "A template expression can't exceed 24,576
characters" (ARM template syntax and expressions), and a VM's ``osProfile.customData``,
``adminUsername`` and ``computerName`` cannot be updated after the VM is created (the Compute
API's description of ``customData``: "This property cannot be updated after the VM is created";
a changed value fails the deployment with ``PropertyChangeNotAllowed``).
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from pathlib import Path

import tree_sitter as ts

from .evaluator import Evaluator, Unsupported
from .syntax import LOAD_FUNCTIONS, parse, resources, string_value, text

MAX_EXPRESSION = 24_576  # characters of one ARM template expression

# resource type -> property paths Azure refuses to change once the resource exists
IMMUTABLE = {
    "microsoft.compute/virtualmachines": (
        ("properties", "osProfile", "customData"),
        ("properties", "osProfile", "adminUsername"),
        ("properties", "osProfile", "computerName"),
    ),
}


def _arm_literal(value: str) -> int:
    """Characters of ``'value'`` as an ARM expression string literal (a quote is doubled)."""
    return len(value) + value.count("'") + 2


def _loaded_length(call: ts.Node, base: Path) -> int:
    fn = text(call.named_children[0])
    ref = string_value(call.named_children[1].named_children[0])
    path = (base / ref).resolve()
    if fn == "loadFileAsBase64":
        return _arm_literal(base64.b64encode(path.read_bytes()).decode())
    content = path.read_text("utf-8")
    if fn == "loadJsonContent":  # json('<compact text>')
        return _arm_literal(json.dumps(json.loads(content), separators=(",", ":"))) + 6
    return _arm_literal(content)


def expression_length(path: Path, variable: str) -> int:
    """The length of the ARM expression a Bicep variable compiles to, estimated from its source:
    each ``load*()`` call counts as the literal Bicep inlines, each parameter or variable it
    reads as ``parameters('x')`` / ``variables('x')``, each user-defined or imported function as
    ``__bicep.f``. A variable that is only a ``load*()`` call (or any literal) is a plain JSON value
    after compilation, not an expression: 0. Within a few percent of the compiled template."""
    tree = parse(Path(path).read_bytes())
    decls = {text(d.named_children[0]): d for d in tree.root_node.named_children
             if d.type in ("variable_declaration", "parameter_declaration",
                           "user_defined_function", "import_functionality")}
    node = next((d.named_children[-1] for d in tree.root_node.named_children
                 if d.type == "variable_declaration" and text(d.named_children[0]) == variable),
                None)
    if node is None:
        raise Unsupported(f"{Path(path).name} has no variable {variable}")
    if node.type in ("string", "number", "boolean", "null") and string_value(node) is not None:
        return 0
    if node.type == "call_expression" and text(node.named_children[0]) in LOAD_FUNCTIONS:
        return 0
    kinds = {name: d.type for name, d in decls.items()}
    imported = _imported_names(tree)
    base = Path(path).resolve().parent

    def size(n: ts.Node) -> int:
        if n.type == "call_expression" and text(n.named_children[0]) in LOAD_FUNCTIONS:
            return _loaded_length(n, base)
        if n.type == "identifier":
            name = text(n)
            kind = kinds.get(name)
            if kind == "parameter_declaration":
                return len(f"parameters('{name}')")
            if kind == "variable_declaration":
                return len(f"variables('{name}')")
            if kind == "user_defined_function" or name in imported:
                return len(f"__bicep.{name}")
            return len(name)
        if not n.children:
            return len(n.text)
        # the text between children (spaces, punctuation) plus the children
        inner = sum(size(c) for c in n.children)
        gaps = (n.end_byte - n.start_byte) - sum(c.end_byte - c.start_byte for c in n.children)
        return inner + gaps

    return size(node) + 2  # the brackets: "[...]"


def _imported_names(tree: ts.Tree) -> set[str]:
    out = set()
    for d in tree.root_node.named_children:
        if d.type == "import_functionality":
            out.update(text(c) for c in d.named_children if c.type == "identifier")
    return out


@dataclass(frozen=True)
class Change:
    resource: str
    path: tuple[str, ...]
    before: object
    after: object

    def __str__(self) -> str:
        return (f"{self.resource}.{'.'.join(self.path)} changes: Azure refuses it "
                "(PropertyChangeNotAllowed)")


def immutable_changes(before: Evaluator, after: Evaluator) -> list[Change]:
    """Properties of the template's resources that differ between two deployments (the same
    template with other parameter values) although Azure does not let them change. Resources
    declared in a loop are skipped."""
    changes = []
    for res in resources(before.t.tree):
        paths = IMMUTABLE.get(res.type.lower(), ())
        if res.existing or res.loop or not paths:
            continue
        for path in paths:
            old, new = before.resource(res.symbol, *path), after.resource(res.symbol, *path)
            if old != new:
                changes.append(Change(res.symbol, path, old, new))
    return changes
