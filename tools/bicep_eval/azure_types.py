"""Resource bodies checked against Azure's type data (../shared/azure-types, generated from
Azure/bicep-types-az: the data the Bicep compiler itself uses)."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import tree_sitter as ts

from .syntax import Resource, loop_body, object_properties, pos, string_value

# The type data: ../shared/azure-types beside the checkout (where CI puts it), or BICEP_EVAL_TYPES.
AZURE_TYPES = Path(
    os.environ.get("BICEP_EVAL_TYPES")
    or Path(__file__).resolve().parents[3] / "shared" / "azure-types"
)

FLAG_REQUIRED = 1
FLAG_READONLY = 2

# Keys Bicep itself understands in a resource body, on top of the type's own properties.
BICEP_RESOURCE_KEYWORDS = {"parent", "scope", "dependsOn"}

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


def provider(rtype: str) -> str:
    """'Microsoft.Storage' of 'Microsoft.Storage/storageAccounts/...' (as written)."""
    return rtype.split("/", 1)[0]


@cache
def typed_providers() -> frozenset[str]:
    """Resource providers (lowercase) the type data covers."""
    return frozenset(k.split("/", 1)[0] for k in type_index())


def is_typed(rtype: str) -> bool:
    """False when the type data has nothing of the resource's provider: its body cannot be
    checked here (``untyped`` lists such resources; nothing passes for checked silently)."""
    return provider(rtype).lower() in typed_providers()


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
            self.check_value(value.named_children[0], t, path)
            return
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
                    f"{where} is not a property of this type (writable: "
                    f"{', '.join(writable) or 'none'})",
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


def _check_reference(checker: BodyChecker, res: Resource) -> list[Finding]:
    """An existing resource is a reference: only name, parent and scope are meaningful."""
    assert res.body is not None
    for key, _, prop in object_properties(res.body):
        if key not in {"name", "parent", "scope"}:
            checker.report(prop, f"{key} is not allowed on an existing resource")
    if "name" not in {k for k, _, _ in object_properties(res.body)}:
        checker.report(res.body, "required property name is missing")
    return checker.findings


def _check_untyped(res: Resource, file: str) -> list[Finding]:
    """What holds for any resource (an object body, a name); no property is checked."""
    if res.body is None:
        return [Finding(file, pos(res.node), f"{res.symbol}: no object literal body to check")]
    checker = BodyChecker(TypeFile(Path(), []), file, res.symbol)
    if res.existing:
        return _check_reference(checker, res)
    if "name" not in {k for k, _, _ in object_properties(res.body)}:
        checker.report(res.body, "required property name is missing")
    return checker.findings


def check_resource(res: Resource, file: str) -> list[Finding]:
    """Findings against the type data; a resource of a provider without type data gets only
    the checks of :func:`_check_untyped` (and is listed by ``checks.untyped``)."""
    if not is_typed(res.type):
        return _check_untyped(res, file)
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
        return _check_reference(checker, res)
    checker.check_object(res.body, body_t, "", extra_keys=BICEP_RESOURCE_KEYWORDS)
    return checker.findings
