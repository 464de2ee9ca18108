"""Offline Bicep checks: syntax (tree-sitter-bicep) and resource bodies against Azure's type data.

No Bicep compiler is available, so this does what the compiler's type check would do for the parts
that matter here, using the same data (``../shared/azure-types``, generated from the public
``Azure/bicep-types-az`` repository):

* every file parses with no ERROR or MISSING node;
* every ``resource sym 'Type@apiVersion'`` names a type and API version that exist;
* every property written in a resource body (object literals, arrays of object literals, loops
  ``[for ...: {...}]`` and both branches of ``c ? {...} : {...}``) is declared for that type at
  that path, is not read-only, and has a literal of a compatible kind (string, number, bool,
  object, array; a string literal must be one of the allowed values of a closed enum);
* every required property is present in each object literal (unless it is computed by an
  expression, which cannot be seen through);
* modules point at files that exist, and pass only parameters the module declares, and every
  parameter without a default;
* ``loadTextContent`` / ``loadJsonContent`` / ``loadFileAsBase64`` name files that exist;
* every name used in an expression is declared (parameter, variable, resource, module, loop
  variable, lambda parameter, or the ``az`` / ``sys`` namespaces).

Values computed by expressions (variables, function calls, lambdas) are not evaluated: what they
produce is beyond a syntax-level check and is covered by the contract and KQL tests instead.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import tree_sitter as ts
import tree_sitter_bicep as tsb

from .paths import AZURE_TYPES

FLAG_REQUIRED = 1
FLAG_READONLY = 2

# Keys Bicep itself understands in a resource body, on top of the type's own properties.
BICEP_RESOURCE_KEYWORDS = {"parent", "scope", "dependsOn"}


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


def string_value(node: ts.Node) -> str | None:
    """The value of a string literal without interpolation, else None."""
    if node.type != "string":
        return None
    parts = []
    for c in node.named_children:
        if c.type == "string_content":
            parts.append(text(c))
        elif c.type == "escape_sequence":
            parts.append(
                {"\\'": "'", "\\\\": "\\", "\\n": "\n", "\\r": "\r", "\\t": "\t", "\\$": "$"}.get(
                    text(c), text(c)
                )
            )
        else:  # interpolation
            return None
    return "".join(parts)


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


# --- Azure type data --------------------------------------------------------------------------


@dataclass
class TypeFile:
    path: Path
    entries: list

    def at(self, ref: dict) -> dict:
        return self.entries[int(ref["$ref"].rsplit("/", 1)[1])]


@cache
def type_index() -> dict[str, tuple[Path, int]]:
    """'type@apiversion' (lowercase) -> (types.json, index of the ResourceType entry)."""
    index = {}
    for f in sorted(AZURE_TYPES.glob("*/*/*/types.json")):
        for i, e in enumerate(json.loads(f.read_text("utf-8"))):
            if e.get("$type") == "ResourceType":
                index.setdefault(e["name"].lower(), (f, i))
    if not index:
        raise RuntimeError(f"no resource types found under {AZURE_TYPES}")
    return index


@cache
def _type_file(path: Path) -> TypeFile:
    return TypeFile(path, json.loads(path.read_text("utf-8")))


def known_versions(rtype: str) -> list[str]:
    prefix = rtype.lower() + "@"
    return sorted(k.split("@", 1)[1] for k in type_index() if k.startswith(prefix))


def resource_body_type(type_and_version: str) -> tuple[TypeFile, dict] | None:
    hit = type_index().get(type_and_version.lower())
    if hit is None:
        return None
    tf = _type_file(hit[0])
    return tf, tf.at(tf.entries[hit[1]]["body"])


# --- checking a body against a type -----------------------------------------------------------


@dataclass
class Shape:
    """What an object literal may contain at one path."""

    properties: dict[str, dict]  # name -> {"type": ref, "flags": int}
    additional: dict | None  # ref of additionalProperties' type, or None
    open: bool  # anything goes (AnyType, or too loose to tell)


def _resolve_kind(tf: TypeFile, t: dict) -> set[str]:
    """Literal kinds acceptable for a type: string, number, bool, object, array, null, any."""
    k = t["$type"]
    if k in ("StringType", "StringLiteralType"):
        return {"string"}
    if k == "IntegerType":
        return {"number"}
    if k == "BooleanType":
        return {"bool"}
    if k in ("ObjectType", "DiscriminatedObjectType"):
        return {"object"}
    if k == "ArrayType":
        return {"array"}
    if k == "NullType":
        return {"null"}
    if k == "UnionType":
        out = set()
        for e in t["elements"]:
            out |= _resolve_kind(tf, tf.at(e))
        return out
    return {"any"}


def _closed_string_values(tf: TypeFile, t: dict) -> set[str] | None:
    """Allowed string literals when the type is a closed enum, else None."""
    if t["$type"] == "StringLiteralType":
        return {t["value"]}
    if t["$type"] == "UnionType":
        values = set()
        for e in t["elements"]:
            et = tf.at(e)
            if et["$type"] == "StringLiteralType":
                values.add(et["value"])
            elif et["$type"] in ("StringType", "AnyType"):
                return None
        return values or None
    return None


def _shape(tf: TypeFile, t: dict, obj: ts.Node | None) -> Shape:
    k = t["$type"]
    if k == "ObjectType":
        return Shape(dict(t.get("properties", {})), t.get("additionalProperties"), False)
    if k == "DiscriminatedObjectType":
        props = dict(t.get("baseProperties", {}))
        chosen = None
        if obj is not None:
            for key, val, _ in object_properties(obj):
                if key == t["discriminator"]:
                    chosen = string_value(val)
        elements = t["elements"]
        if chosen is not None and chosen in elements:
            props.update(tf.at(elements[chosen]).get("properties", {}))
        else:  # unknown or computed discriminator: any element's properties
            for ref in elements.values():
                props.update(tf.at(ref).get("properties", {}))
        return Shape(props, None, False)
    if k == "UnionType":
        props, additional, is_open = {}, None, False
        for e in t["elements"]:
            et = tf.at(e)
            if et["$type"] in ("ObjectType", "DiscriminatedObjectType"):
                s = _shape(tf, et, obj)
                props.update(s.properties)
                additional = additional or s.additional
                is_open = is_open or s.open
            elif et["$type"] == "AnyType":
                is_open = True
        return Shape(props, additional, is_open)
    return Shape({}, None, True)


@dataclass
class Finding:
    file: str
    where: str
    message: str

    def __str__(self) -> str:
        return f"{self.file}:{self.where}: {self.message}"


@dataclass
class BodyChecker:
    tf: TypeFile
    file: str
    resource: str
    findings: list[Finding] = field(default_factory=list)

    def report(self, node: ts.Node, message: str) -> None:
        self.findings.append(Finding(self.file, pos(node), f"{self.resource}: {message}"))

    def check_value(self, value: ts.Node, t: dict, path: str) -> None:
        kind = value.type
        if kind == "parenthesized_expression" and value.named_children:
            return self.check_value(value.named_children[0], t, path)
        if kind == "ternary_expression":
            for branch in value.named_children[1:]:
                self.check_value(branch, t, path)
            return
        if kind == "null":
            return  # null omits the property at deployment
        literal = {
            "string": "string",
            "number": "number",
            "boolean": "bool",
            "object": "object",
            "array": "array",
            "for_statement": "array",
        }.get(kind)
        if literal is None:
            return  # an expression: cannot be seen through
        accepted = _resolve_kind(self.tf, t)
        if "any" not in accepted and literal not in accepted:
            self.report(
                value, f"{path}: a {literal} where the type expects {' or '.join(sorted(accepted))}"
            )
            return
        if kind == "string":
            allowed = _closed_string_values(self.tf, t)
            v = string_value(value)
            if allowed is not None and v is not None and v not in allowed:
                self.report(value, f"{path}: {v!r} is not one of {sorted(allowed)}")
        elif kind == "object":
            self.check_object(value, t, path)
        elif kind in ("array", "for_statement"):
            item_t = None
            if t["$type"] == "ArrayType":
                item_t = self.tf.at(t["itemType"])
            elif t["$type"] == "UnionType":
                arrays = [
                    self.tf.at(e) for e in t["elements"] if self.tf.at(e)["$type"] == "ArrayType"
                ]
                item_t = self.tf.at(arrays[0]["itemType"]) if len(arrays) == 1 else None
            if item_t is None:
                return
            if kind == "array":
                for i, item in enumerate(value.named_children):
                    self.check_value(item, item_t, f"{path}[{i}]")
            else:
                body = loop_body(value)
                if body is not None:
                    self.check_value(body, item_t, f"{path}[*]")

    def check_object(
        self,
        obj: ts.Node,
        t: dict,
        path: str,
        extra_keys: set[str] = frozenset(),
        required: bool = True,
    ) -> None:
        shape = _shape(self.tf, t, obj)
        if shape.open:
            return
        present = set()
        for key, val, prop in object_properties(obj):
            if key is None:  # computed key, e.g. '${identity.id}': {}
                if shape.additional is not None:
                    self.check_value(val, self.tf.at(shape.additional), f"{path}[computed key]")
                else:
                    self.report(prop, f"{path}: a computed key where the type has fixed properties")
                continue
            present.add(key)
            where = f"{path}.{key}" if path else key
            if key in extra_keys:
                continue
            decl = shape.properties.get(key)
            if decl is None:
                if shape.additional is not None:
                    self.check_value(val, self.tf.at(shape.additional), where)
                    continue
                writable = sorted(
                    n
                    for n, d in shape.properties.items()
                    if not (
                        d.get("flags", 0) & FLAG_READONLY and not d.get("flags", 0) & FLAG_REQUIRED
                    )
                )
                self.report(
                    prop,
                    f"{where} is not a property of this type (writable: {', '.join(writable) or 'none'})",
                )
                continue
            flags = decl.get("flags", 0)
            if flags & FLAG_READONLY and not flags & FLAG_REQUIRED:
                self.report(prop, f"{where} is read-only")
                continue
            self.check_value(val, self.tf.at(decl["type"]), where)
        if required:
            for name, decl in sorted(shape.properties.items()):
                flags = decl.get("flags", 0)
                if flags & FLAG_REQUIRED and name not in present:
                    self.report(
                        obj, f"required property {(path + '.' if path else '') + name} is missing"
                    )


def loop_body(for_node: ts.Node) -> ts.Node | None:
    """The body of ``[for ...: body]`` (an object, or ``if (...) {...}``)."""
    body = for_node.child_by_field_name("body")
    if body is None:
        named = [c for c in for_node.named_children]
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


def _declaration_body(decl: ts.Node) -> tuple[ts.Node | None, bool, bool]:
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
        body, loop, cond = _declaration_body(decl)
        out.append(Resource(text(sym), rtype, version, existing, body, decl, loop, cond))
    return out


def check_resource(res: Resource, file: str) -> list[Finding]:
    found = resource_body_type(res.type_and_version)
    if found is None:
        versions = known_versions(res.type)
        hint = f"known versions: {', '.join(versions)}" if versions else "unknown resource type"
        return [
            Finding(
                file, pos(res.node), f"{res.symbol}: {res.type_and_version} does not exist ({hint})"
            )
        ]
    tf, body_t = found
    if res.body is None:
        return [Finding(file, pos(res.node), f"{res.symbol}: no object literal body to check")]
    checker = BodyChecker(tf, file, res.symbol)
    if res.existing:
        # an existing resource is a reference: only name, parent and scope are meaningful
        for key, _, prop in object_properties(res.body):
            if key not in {"name", "parent", "scope"}:
                checker.report(prop, f"{key} is not allowed on an existing resource")
        if "name" not in {k for k, _, _ in object_properties(res.body)}:
            checker.report(res.body, "required property name is missing")
        return checker.findings
    checker.check_object(res.body, body_t, "", extra_keys=BICEP_RESOURCE_KEYWORDS)
    return checker.findings


# --- modules and loaded files ------------------------------------------------------------------


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


def _output_references(tree: ts.Tree) -> list[tuple[str, str, ts.Node]]:
    """(module symbol, output name, node) for every `sym.outputs.name` (or `sym[i].outputs.name`)."""
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
        body, _, _ = _declaration_body(decl)
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
    for sym, name, node in _output_references(tree):
        if sym in module_outputs and name not in module_outputs[sym]:
            findings.append(Finding(path.name, pos(node), f"module {sym} has no output {name}"))
    return findings


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


def check_loads(tree: ts.Tree, path: Path) -> list[Finding]:
    findings = []
    for fn, ref, node in load_calls(tree):
        if ref is None:
            findings.append(Finding(path.name, pos(node), f"{fn}() needs a literal path"))
        elif not (path.parent / ref).resolve().is_file():
            findings.append(Finding(path.name, pos(node), f"{fn}('{ref}'): no such file"))
    return findings


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
            for item in body[body.index("{") + 1:body.index("}")].split(","):
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
    return out


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


def _declared_names(tree: ts.Tree) -> set[str]:
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


def _is_reference(node: ts.Node) -> bool:
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
    declared = _declared_names(tree)
    problems = []

    def visit(n: ts.Node) -> None:
        if n.type == "identifier" and _is_reference(n) and text(n) not in declared:
            problems.append(f"{pos(n)}: {text(n)!r} is not declared")
        for c in n.named_children:
            visit(c)

    visit(tree.root_node)
    return problems
