"""Bicep source as tree-sitter-bicep parses it: syntax errors, literals, declarations,
decorators and load*() calls. Nothing here knows Azure's types or evaluates anything."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import tree_sitter as ts
import tree_sitter_bicep as tsb


@cache
def _parser() -> ts.Parser:
    return ts.Parser(ts.Language(tsb.language()))


def parse(source: str | bytes) -> ts.Tree:
    if isinstance(source, str):
        source = source.encode("utf-8")
    return _parser().parse(source)


def text(node: ts.Node) -> str:
    return node.text.decode("utf-8")


def pos(node: ts.Node) -> str:
    return f"{node.start_point[0] + 1}:{node.start_point[1] + 1}"


# --- syntax -----------------------------------------------------------------------------------


def syntax_problems(tree: ts.Tree) -> list[str]:
    problems = []

    def visit(n: ts.Node) -> None:
        if n.is_error:
            problems.append(f"{pos(n)}: syntax error near {text(n)[:60]!r}")
        elif n.is_missing:
            problems.append(f"{pos(n)}: missing {n.type!r}")
        if n.has_error or n.is_missing:
            for c in n.children:
                visit(c)

    visit(tree.root_node)
    if tree.root_node.has_error and not problems:
        problems.append("syntax error (tree marked as erroneous)")
    return problems


# --- literals ---------------------------------------------------------------------------------


ESCAPES = {"\\'": "'", "\\\\": "\\", "\\n": "\n", "\\r": "\r", "\\t": "\t", "\\$": "$"}


def unescape(sequence: str) -> str:
    """One escape sequence of a Bicep string (``\\'``, ``\\u{263A}``...) as the character."""
    m = re.fullmatch(r"\\u\{([0-9A-Fa-f]+)\}", sequence)
    return chr(int(m.group(1), 16)) if m else ESCAPES.get(sequence, sequence)


def string_parts(node: ts.Node) -> list[str | ts.Node]:
    """A string literal as text pieces and interpolation nodes, in order. tree-sitter-bicep
    leaves some escapes (``\\$``) out of the tree: the bytes between children are read too."""
    if node.children and text(node.children[0]) == "'''":  # multi-line: no escapes at all
        return [node.text.decode("utf-8")[3:-3].removeprefix("\n")]
    source, base = node.text, node.start_byte
    inner = node.children[1:-1]
    parts: list[str | ts.Node] = []
    at = node.children[0].end_byte
    for c in inner:
        if c.start_byte > at:
            parts.append(unescape(source[at - base : c.start_byte - base].decode("utf-8")))
        if c.type == "string_content":
            parts.append(text(c))
        elif c.type == "escape_sequence":
            parts.append(unescape(text(c)))
        else:  # interpolation; the parser counts blanks just before ``${`` into it
            lead = c.text[: c.text.index(b"${")].decode("utf-8")
            if lead:
                parts.append(unescape(lead))
            parts.append(c.named_children[0])
        at = c.end_byte
    end = node.end_byte - 1  # the closing quote (the parser may count blanks before it into it)
    if end > at:
        parts.append(unescape(source[at - base : end - base].decode("utf-8")))
    return parts


def string_value(node: ts.Node) -> str | None:
    """The value of a string literal without interpolation, else None."""
    if node.type != "string":
        return None
    parts = string_parts(node)
    return None if any(not isinstance(p, str) for p in parts) else "".join(parts)


def property_key(prop: ts.Node) -> str | None:
    """The key of an object property; None for a computed (interpolated) key."""
    key = prop.named_children[0]
    if key.type == "string":
        return string_value(key)
    return text(key)


def property_value(prop: ts.Node) -> ts.Node:
    return prop.named_children[-1]


def object_properties(obj: ts.Node) -> list[tuple[str, ts.Node, ts.Node]]:
    """(key, value node, property node) for each property of an object literal."""
    return [
        (property_key(p), property_value(p), p)
        for p in obj.named_children
        if p.type == "object_property"
    ]


# --- declarations ------------------------------------------------------------------------------


def loop_body(for_node: ts.Node) -> ts.Node | None:
    """The body of ``[for ...: body]`` (an object, or ``if (...) {...}``)."""
    body = for_node.child_by_field_name("body")
    if body is None:
        named = list(for_node.named_children)
        body = named[-1] if named else None
    if body is not None and body.type == "if_statement":
        objs = [c for c in body.named_children if c.type == "object"]
        body = objs[-1] if objs else None
    return body


# --- declarations ------------------------------------------------------------------------------


@dataclass
class Resource:
    symbol: str
    type: str  # e.g. Microsoft.Insights/dataCollectionRules
    api_version: str
    existing: bool
    body: ts.Node | None  # the object literal
    node: ts.Node
    loop: bool = False
    conditional: bool = False

    @property
    def type_and_version(self) -> str:
        return f"{self.type}@{self.api_version}"


def declaration_body(decl: ts.Node) -> tuple[ts.Node | None, bool, bool]:
    """(object literal, in a loop, conditional) of a resource or module declaration."""
    after_eq = False
    for c in decl.children:
        if c.type == "=":
            after_eq = True
            continue
        if not after_eq:
            continue
        if c.type == "object":
            return c, False, False
        if c.type == "if_statement":
            objs = [x for x in c.named_children if x.type == "object"]
            return (objs[-1] if objs else None), False, True
        if c.type == "for_statement":
            body = c.child_by_field_name("body") or (
                c.named_children[-1] if c.named_children else None
            )
            cond = body is not None and body.type == "if_statement"
            return loop_body(c), True, cond
    return None, False, False


def resources(tree: ts.Tree) -> list[Resource]:
    out = []
    for decl in tree.root_node.named_children:
        if decl.type != "resource_declaration":
            continue
        sym = decl.named_children[0]
        type_str = next(c for c in decl.named_children if c.type == "string")
        tv = string_value(type_str)
        if tv is None or "@" not in tv:
            raise ValueError(
                f"{pos(type_str)}: resource type without an API version: {text(type_str)}"
            )
        rtype, version = tv.split("@", 1)
        existing = any(c.type == "existing" for c in decl.children)
        body, loop, cond = declaration_body(decl)
        out.append(Resource(text(sym), rtype, version, existing, body, decl, loop, cond))
    return out


@dataclass
class Param:
    name: str
    has_default: bool


def params(tree: ts.Tree) -> dict[str, Param]:
    out = {}
    for decl in tree.root_node.named_children:
        if decl.type == "parameter_declaration":
            name = text(decl.named_children[0])
            has_default = any(c.type == "=" for c in decl.children)
            nullable = any(
                c.type == "nullable_type" or text(c).endswith("?") for c in decl.named_children[1:2]
            )
            out[name] = Param(name, has_default or nullable)
    return out


def outputs(tree: ts.Tree) -> set[str]:
    return {
        text(d.named_children[0])
        for d in tree.root_node.named_children
        if d.type == "output_declaration"
    }


def output_references(tree: ts.Tree) -> list[tuple[str, str, ts.Node]]:
    """(module symbol, output name, node) for every `sym.outputs.name` (or
    `sym[i].outputs.name`)."""
    out = []

    def visit(n: ts.Node) -> None:
        if n.type == "member_expression":
            obj = n.child_by_field_name("object")
            prop = n.child_by_field_name("property")
            if obj is not None and obj.type == "member_expression" and prop is not None:
                inner_prop = obj.child_by_field_name("property")
                base = obj.child_by_field_name("object")
                if base is not None and base.type == "subscript_expression":
                    base = base.named_children[0]
                if (
                    inner_prop is not None
                    and text(inner_prop) == "outputs"
                    and base is not None
                    and base.type == "identifier"
                ):
                    out.append((text(base), text(prop), n))
        for c in n.named_children:
            visit(c)

    visit(tree.root_node)
    return out


LOAD_FUNCTIONS = {"loadTextContent", "loadJsonContent", "loadYamlContent", "loadFileAsBase64"}


def load_calls(tree: ts.Tree) -> list[tuple[str, str, ts.Node]]:
    """(function, literal path, call node) for every load*() call."""
    out = []

    def visit(n: ts.Node) -> None:
        if n.type == "call_expression":
            fn = n.child_by_field_name("function") or n.named_children[0]
            if text(fn) in LOAD_FUNCTIONS:
                args = n.child_by_field_name("arguments") or n.named_children[1]
                first = args.named_children[0] if args.named_children else None
                value = string_value(first) if first is not None else None
                out.append((text(fn), value, n))
        for c in n.named_children:
            visit(c)

    visit(tree.root_node)
    return out


def decorator_nodes(decl: ts.Node) -> list[ts.Node]:
    """The decorators of a declaration (tree-sitter-bicep puts them just before it)."""
    groups = [c for c in decl.named_children if c.type == "decorators"]
    prev = decl.prev_named_sibling
    if prev is not None and prev.type == "decorators":
        groups.append(prev)
    return [d for g in groups for d in g.named_children if d.type == "decorator"]


def decorator_map(decl: ts.Node) -> dict[str, list[ts.Node]]:
    """decorator name (``secure``, ``minLength``...) -> its argument nodes."""
    out = {}
    for deco in decorator_nodes(decl):
        call = deco.named_children[0]
        if call.type == "call_expression":
            fn, args = call.named_children[0], call.named_children[1].named_children
        else:
            fn, args = call, []
        out[text(fn).split(".")[-1]] = list(args)
    return out


def exported(tree: ts.Tree) -> set[str]:
    """Names a file exports (type, var and func statements with @export())."""
    return {
        text(decl.named_children[0])
        for decl in tree.root_node.named_children
        if decl.type in ("type_declaration", "variable_declaration", "user_defined_function")
        and "export" in decorator_map(decl)
    }


# --- a small evaluator for literal data in Bicep (rule tables and the like) -------------------


class Expression:
    """Stands for a value computed by an expression the evaluator does not evaluate."""

    def __init__(self, source: str):
        self.source = source

    def __repr__(self) -> str:
        return f"Expression({self.source!r})"


@dataclass(frozen=True)
class Loaded:
    """The value of loadTextContent('path') / loadJsonContent('path'): the file it names."""

    function: str
    path: Path


def literal_value(node: ts.Node, base: Path):
    """Evaluate literals (strings, numbers, bools, null, arrays, objects) and load*() calls."""
    t = node.type
    if t == "string":
        v = string_value(node)
        return v if v is not None else Expression(text(node))
    if t == "number":
        return int(text(node))
    if t == "boolean":
        return text(node) == "true"
    if t == "null":
        return None
    if t == "array":
        return [literal_value(c, base) for c in node.named_children]
    if t == "object":
        return {k: literal_value(v, base) for k, v, _ in object_properties(node)}
    if t == "call_expression":
        fn = text(node.child_by_field_name("function") or node.named_children[0])
        args = node.child_by_field_name("arguments") or node.named_children[1]
        if fn in LOAD_FUNCTIONS and args.named_children:
            ref = string_value(args.named_children[0])
            if ref is not None:
                return Loaded(fn, (base / ref).resolve())
    return Expression(text(node))


def variables(tree: ts.Tree) -> dict[str, ts.Node]:
    """Top-level variable declarations: name -> value node."""
    out = {}
    for decl in tree.root_node.named_children:
        if decl.type == "variable_declaration":
            out[text(decl.named_children[0])] = decl.named_children[-1]
    return out
