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
from .syntax import (
    LOAD_FUNCTIONS,
    declaration_body,
    object_properties,
    parse,
    resources,
    string_value,
    text,
)

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


class _Sizer:
    """The ARM text of Bicep expressions in one template, measured from the source: each
    ``load*()`` call inside an expression counts as the literal Bicep inlines, each parameter or
    variable it reads as ``parameters('x')`` / ``variables('x')``, each user-defined or imported
    function as ``__bicep.f``. Within a few percent of the compiled template."""

    def __init__(self, path: Path):
        self.path = Path(path).resolve()
        self.tree = parse(self.path.read_bytes())
        self.kinds = {
            text(d.named_children[0]): d.type
            for d in self.tree.root_node.named_children
            if d.type in ("variable_declaration", "parameter_declaration", "user_defined_function")
        }
        self.imported = _imported_names(self.tree)

    def leaves(self, node: ts.Node, where: str) -> list[tuple[str, int]]:
        """(where, length) of each expression Bicep emits for ``node``: object and array
        literals become JSON structure, and so do literals and a ``load*()`` call standing
        alone (a compile-time value); anything else is one expression."""
        if node.type == "object":
            return [
                leaf
                for k, v, _ in object_properties(node)
                for leaf in self.leaves(v, f"{where}.{k}")
            ]
        if node.type == "array":
            return [
                leaf
                for i, c in enumerate(node.named_children)
                for leaf in self.leaves(c, f"{where}[{i}]")
            ]
        if node.type in ("number", "boolean", "null") or string_value(node) is not None:
            return []
        if node.type == "call_expression" and text(node.named_children[0]) in LOAD_FUNCTIONS:
            return []
        return [(where, self.size(node) + 2)]  # the brackets: "[...]"

    def size(self, n: ts.Node) -> int:
        if n.type == "call_expression" and text(n.named_children[0]) in LOAD_FUNCTIONS:
            return _loaded_length(n, self.path.parent)
        if n.type == "identifier":
            name = text(n)
            kind = self.kinds.get(name)
            if kind == "parameter_declaration":
                return len(f"parameters('{name}')")
            if kind == "variable_declaration":
                return len(f"variables('{name}')")
            if kind == "user_defined_function" or name in self.imported:
                return len(f"__bicep.{name}")
            return len(name)
        if not n.children:
            return len(n.text)
        gaps = (n.end_byte - n.start_byte) - sum(c.end_byte - c.start_byte for c in n.children)
        return sum(self.size(c) for c in n.children) + gaps


def expression_length(path: Path, variable: str) -> int:
    """The longest ARM expression a Bicep variable compiles to (0: none, a plain JSON value)."""
    sizer = _Sizer(path)
    node = next(
        (
            d.named_children[-1]
            for d in sizer.tree.root_node.named_children
            if d.type == "variable_declaration" and text(d.named_children[0]) == variable
        ),
        None,
    )
    if node is None:
        raise Unsupported(f"{Path(path).name} has no variable {variable}")
    return max((n for _, n in sizer.leaves(node, variable)), default=0)


def expressions(path: Path) -> list[tuple[str, int]]:
    """(where, length) of every expression of a template: variables, outputs, the bodies of
    resources and modules, parameter defaults."""
    sizer = _Sizer(path)
    out = []
    for d in sizer.tree.root_node.named_children:
        if d.type in ("variable_declaration", "output_declaration", "parameter_declaration"):
            if d.type == "parameter_declaration" and not any(c.type == "=" for c in d.children):
                continue
            out += sizer.leaves(d.named_children[-1], text(d.named_children[0]))
        elif d.type in ("resource_declaration", "module_declaration"):
            body, _, _ = declaration_body(d)
            if body is not None:
                out += sizer.leaves(body, text(d.named_children[0]))
    return out


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
        return (
            f"{self.resource}.{'.'.join(self.path)} changes: Azure refuses it "
            "(PropertyChangeNotAllowed)"
        )


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
