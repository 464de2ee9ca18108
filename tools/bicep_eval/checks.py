"""Whole-file checks: modules and their parameters and outputs, loaded files, imports, and
every name used in an expression declared."""

from __future__ import annotations

from pathlib import Path

import tree_sitter as ts

from .azure_types import Finding, check_resource, is_typed, provider
from .syntax import (
    declaration_body,
    exported,
    load_calls,
    object_properties,
    output_references,
    outputs,
    params,
    parse,
    pos,
    resources,
    string_value,
    syntax_problems,
    text,
)


def check_modules(tree: ts.Tree, path: Path) -> list[Finding]:
    findings = []
    module_outputs: dict[str, set[str]] = {}
    for decl in tree.root_node.named_children:
        if decl.type != "module_declaration":
            continue
        sym = text(decl.named_children[0])
        ref = string_value(next(c for c in decl.named_children if c.type == "string"))
        if ref is None or ":" in ref:  # registry / template spec references are out of scope here
            continue
        target = (path.parent / ref).resolve()
        if not target.is_file():
            findings.append(Finding(path.name, pos(decl), f"module {sym}: {ref} does not exist"))
            continue
        target_tree = parse(target.read_bytes())
        declared = params(target_tree)
        module_outputs[sym] = outputs(target_tree)
        body, _, _ = declaration_body(decl)
        if body is None:
            findings.append(Finding(path.name, pos(decl), f"module {sym}: no object literal body"))
            continue
        given = {}
        for key, val, prop in object_properties(body):
            if key not in {"name", "params", "scope", "dependsOn"}:
                findings.append(
                    Finding(path.name, pos(prop), f"module {sym}: unknown module property {key}")
                )
            if key == "params" and val.type == "object":
                given = {k: p for k, _, p in object_properties(val)}
        for k, p in given.items():
            if k not in declared:
                findings.append(
                    Finding(path.name, pos(p), f"module {sym}: {ref} has no parameter {k}")
                )
        for name, prm in declared.items():
            if not prm.has_default and name not in given:
                findings.append(
                    Finding(
                        path.name,
                        pos(body),
                        f"module {sym}: required parameter {name} of {ref} is not given",
                    )
                )
    for sym, name, node in output_references(tree):
        if sym in module_outputs and name not in module_outputs[sym]:
            findings.append(Finding(path.name, pos(node), f"module {sym} has no output {name}"))
    return findings


def check_loads(tree: ts.Tree, path: Path) -> list[Finding]:
    findings = []
    for fn, ref, node in load_calls(tree):
        if ref is None:
            findings.append(Finding(path.name, pos(node), f"{fn}() needs a literal path"))
        elif not (path.parent / ref).resolve().is_file():
            findings.append(Finding(path.name, pos(node), f"{fn}('{ref}'): no such file"))
    return findings


def check_imports(tree: ts.Tree, path: Path) -> list[Finding]:
    """Every `import ... from 'file'` names a file that exists and exports what is imported."""
    findings = []
    for decl in tree.root_node.named_children:
        if decl.type != "import_functionality":
            continue
        ref = string_value(next(c for c in decl.named_children if c.type == "string"))
        target = (path.parent / ref).resolve()
        if not target.is_file():
            findings.append(Finding(path.name, pos(decl), f"import from {ref}: no such file"))
            continue
        available = exported(parse(target.read_bytes()))
        body = text(decl)
        if "{" in body:
            for item in body[body.index("{") + 1 : body.index("}")].split(","):
                symbol = item.split()[0] if item.split() else ""
                if symbol and symbol not in available:
                    findings.append(
                        Finding(path.name, pos(decl), f"{ref} does not export {symbol}")
                    )
    return findings


def check_source(source: str | bytes, name: str = "<snippet>", names: bool = False) -> list[str]:
    """Syntax + resource checks of one Bicep text (used by the negative tests)."""
    tree = parse(source)
    problems = syntax_problems(tree)
    if problems:
        return problems
    out = [str(f) for r in resources(tree) for f in check_resource(r, name)]
    if names:
        out += [f"{name}:{p}" for p in undefined_names(tree)]
    return out


def check_file(path: Path) -> list[str]:
    tree = parse(path.read_bytes())
    problems = [f"{path.name}:{p}" for p in syntax_problems(tree)]
    if problems:
        return problems
    out = [str(f) for r in resources(tree) for f in check_resource(r, path.name)]
    out += [str(f) for f in check_modules(tree, path)]
    out += [str(f) for f in check_loads(tree, path)]
    out += [str(f) for f in check_imports(tree, path)]
    out += [f"{path.name}:{p}" for p in undefined_names(tree)]
    out += [f"{path.name}:{p}" for p in conditional_accesses(tree)]
    return out


def untyped(paths: list[Path]) -> dict[str, list[str]]:
    """Resources the type data could not check, by provider (as written): 'file:line: symbol
    Type@version' each. ``check_file`` passes them on the checks any resource must meet only."""
    out: dict[str, list[str]] = {}
    for path in paths:
        for r in resources(parse(path.read_bytes())):
            if not is_typed(r.type):
                out.setdefault(provider(r.type), []).append(
                    f"{path.name}:{pos(r.node)}: {r.symbol} {r.type_and_version}"
                )
    return dict(sorted(out.items()))


# --- symbols: every name used in an expression is declared ---------------------------------------

DECLARATIONS = {
    "parameter_declaration",
    "variable_declaration",
    "resource_declaration",
    "module_declaration",
    "output_declaration",
    "type_declaration",
    "user_defined_function",
    "metadata_declaration",
}
NAMESPACES = {"az", "sys"}


def declared_names(tree: ts.Tree) -> set[str]:
    names = set(NAMESPACES)

    def visit(n: ts.Node) -> None:
        if n.type in DECLARATIONS and n.named_children:
            names.add(text(n.named_children[0]))
        elif n.type in ("loop_variable", "loop_enumerator"):
            names.add(text(n))
        elif n.type == "for_statement":
            # [for x in ...]: the identifier right after `for`
            kids = n.children
            for i, c in enumerate(kids):
                if c.type == "for" and i + 1 < len(kids) and kids[i + 1].type == "identifier":
                    names.add(text(kids[i + 1]))
        elif n.type == "lambda_expression":
            head = n.children[0]
            targets = (
                [head]
                if head.type == "identifier"
                else [c for c in head.named_children if c.type == "identifier"]
            )
            names.update(text(t) for t in targets)
        elif n.type == "import_functionality":
            names.update(text(c) for c in n.named_children if c.type == "identifier")
        elif n.type == "parameter" and n.parent is not None and n.parent.type == "parameters":
            names.add(text(n.named_children[0]))  # a user-defined function's parameter
        for c in n.children:
            visit(c)

    visit(tree.root_node)
    return names


def is_reference(node: ts.Node) -> bool:
    parent = node.parent
    if parent is None:
        return False
    if parent.type in DECLARATIONS and parent.named_children and parent.named_children[0] == node:
        return False
    if parent.type == "object_property" and parent.named_children[0] == node:
        return False
    if parent.type == "call_expression" and parent.named_children[0] == node:
        return False  # a function name
    if parent.type == "lambda_expression" and parent.children[0] == node:
        return False
    if parent.type == "for_statement":
        kids = parent.children
        i = kids.index(node) if node in kids else -1
        if i > 0 and kids[i - 1].type == "for":
            return False
    anc = parent
    while anc is not None:
        if anc.type in ("type", "type_declaration", "import_functionality", "decorator"):
            # decorator arguments are expressions, but their names are functions: handled above
            if anc.type != "decorator":
                return False
            break
        anc = anc.parent
    return True


def undefined_names(tree: ts.Tree) -> list[str]:
    declared = declared_names(tree)
    problems = []

    def visit(n: ts.Node) -> None:
        if n.type == "identifier" and is_reference(n) and text(n) not in declared:
            problems.append(f"{pos(n)}: {text(n)!r} is not declared")
        for c in n.named_children:
            visit(c)

    visit(tree.root_node)
    return problems


def conditional_accesses(tree: ts.Tree) -> list[str]:
    """Property reads of a conditional resource or module (``if (...)``) without ``!`` or ``.?``:
    Bicep 0.36 and later warn (BCP318: "may be null at the start of the deployment")."""
    conditional = {r.symbol for r in resources(tree) if r.conditional}
    for decl in tree.root_node.named_children:
        if decl.type == "module_declaration" and declaration_body(decl)[2]:
            conditional.add(text(decl.named_children[0]))
    problems = []

    def visit(n: ts.Node) -> None:
        if n.type in ("member_expression", "subscript_expression") and n.children:
            obj = n.children[0]
            if obj.type == "subscript_expression" and obj.children:
                obj = obj.children[0]  # sym[i].x
            guarded = any(c.type in ("!", ".?", "?") for c in n.children[1:3])
            if obj.type == "identifier" and text(obj) in conditional and not guarded:
                problems.append(
                    f"{pos(n)}: {text(n)[:60]} reads the conditional {text(obj)} without ! (BCP318)"
                )
        for c in n.children:
            visit(c)

    visit(tree.root_node)
    return problems
