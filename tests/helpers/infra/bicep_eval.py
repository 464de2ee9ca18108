"""A small evaluator for Bicep expressions, so offline tests can compute what a template produces.

No Bicep compiler runs here. This evaluates the parts of a template that are plain data and
functions (parameters with their defaults and decorators, variables, user-defined and imported
functions, loops, lambdas, ``fail()``, ``load*()``) with ARM's semantics for the functions this
project uses, so a test can ask "what command does the Run Command get for these parameters?",
"what customData does the scale set carry?" or "is 731 days of retention refused?" and check the
answer by running it (bash, cloud-init) or comparing it with the service's documented rules.

What it cannot see (a resource's runtime properties, ``reference()``) must be given as
``symbols``; an unknown name or function raises :class:`Unsupported` rather than guessing.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import uuid
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import tree_sitter as ts

from . import bicep
from .bicep import object_properties, text


class BicepFail(Exception):
    """``fail('message')`` was evaluated: the deployment would stop with this message."""


class ParamRejected(Exception):
    """A parameter value breaks its decorators (@allowed, @minValue, ...): ARM refuses it."""


class Unsupported(Exception):
    """Something this evaluator does not model (an unknown name, function or node)."""


@dataclass(frozen=True)
class Closure:
    params: tuple[str, ...]
    node: ts.Node  # the expression to evaluate (see _lambda_of: may wrap the lambda)
    lam: ts.Node  # the lambda_expression node inside it
    scope: dict


# Bicep's operator precedences, lowest first (all left-associative)
PRECEDENCE = {"??": 1, "||": 2, "&&": 3, "==": 4, "!=": 4, "=~": 4, "!~": 4, "<": 5, "<=": 5,
              ">": 5, ">=": 5, "+": 6, "-": 6, "*": 7, "/": 7, "%": 7}
UDF = "<user-defined function>"  # scope marker: no access to the template's names

# ARM's guid() is a name-based (v5) UUID in this namespace over the arguments joined by '-'.
GUID_NAMESPACE = uuid.UUID("11fb06fb-712d-4ddd-98c7-e71bbd588830")
ESCAPES = {"\\'": "'", "\\\\": "\\", "\\n": "\n", "\\r": "\r", "\\t": "\t", "\\$": "$"}


@dataclass
class Template:
    path: Path
    tree: ts.Tree

    def declarations(self, kind: str) -> dict[str, ts.Node]:
        return {text(d.named_children[0]): d for d in self.tree.root_node.named_children
                if d.type == kind}


@cache
def template(path: Path) -> Template:
    tree = bicep.parse(path.read_bytes())
    problems = bicep.syntax_problems(tree)
    if problems:
        raise Unsupported(f"{path}: {problems}")
    return Template(path, tree)


def _left_spine_lambda(node: ts.Node) -> ts.Node | None:
    """tree-sitter-bicep binds ``x => x.a != b`` as ``(x => x).a != b``: find that lambda."""
    n = node
    while n is not None:
        if n.type == "lambda_expression":
            return n
        if n.type in ("member_expression", "subscript_expression", "binary_expression",
                      "ternary_expression") and n.named_children:
            n = n.named_children[0]
        else:
            return None
    return None


class Evaluator:
    def __init__(self, path: Path, params: dict | None = None, symbols: dict | None = None,
                 resource_group: dict | None = None) -> None:
        self.t = template(Path(path).resolve())
        self.given = dict(params or {})
        self.symbols = dict(symbols or {})
        self.rg = resource_group or {
            "id": "/subscriptions/00000000-0000-0000-0000-000000000000/resourceGroups/rg-test",
            "name": "rg-test", "location": "westeurope"}
        self.params = self.t.declarations("parameter_declaration")
        self.vars = self.t.declarations("variable_declaration")
        self.funcs = self.t.declarations("user_defined_function")
        self.resources = self.t.declarations("resource_declaration")
        self.modules = self.t.declarations("module_declaration")
        self.imports = self._imports()
        self._cache: dict[str, object] = {}
        unknown = set(self.given) - set(self.params)
        if unknown:
            raise Unsupported(f"{path.name} has no parameter(s) {sorted(unknown)}")

    # --- declarations ------------------------------------------------------------------------

    def _imports(self) -> dict[str, tuple[Path, str | None]]:
        """local name -> (file, exported name; None for a wildcard namespace)."""
        out = {}
        for d in self.t.tree.root_node.named_children:
            if d.type != "import_functionality":
                continue
            target = (self.t.path.parent / bicep.string_value(
                next(c for c in d.named_children if c.type == "string"))).resolve()
            src = text(d)
            if re.match(r"import\s*\*", src):
                alias = re.search(r"\bas\s+(\w+)", src).group(1)
                out[alias] = (target, None)
            else:
                for item in re.search(r"\{(.*)\}", src, re.DOTALL).group(1).split(","):
                    parts = item.split()
                    if parts:
                        out[parts[-1]] = (target, parts[0])
        return out

    def param(self, name: str):
        if name in self._cache:
            return self._cache[name]
        decl = self.params[name]
        if name in self.given:
            value = self.given[name]
        elif any(c.type == "=" for c in decl.children):
            value = self.expr(decl.named_children[-1], {})
        elif bicep.params(self.t.tree)[name].has_default:  # nullable type
            value = None
        else:
            raise Unsupported(f"parameter {name} has no default: give it")
        self._check_decorators(name, decl, value)
        self._cache[name] = value
        return value

    def _check_decorators(self, name: str, decl: ts.Node, value) -> None:
        deco = bicep.decorator_map(decl)
        if value is None:
            return
        if "allowed" in deco and value not in self.expr(deco["allowed"][0], {}):
            raise ParamRejected(f"{name}: {value!r} is not an allowed value")
        for key, test in (("minValue", lambda v, n: v >= n), ("maxValue", lambda v, n: v <= n),
                          ("minLength", lambda v, n: len(v) >= n),
                          ("maxLength", lambda v, n: len(v) <= n)):
            if key in deco and not test(value, self.expr(deco[key][0], {})):
                raise ParamRejected(f"{name}: {value!r} breaks @{key}")

    def var(self, name: str):
        key = "var:" + name
        if key not in self._cache:
            self._cache[key] = self.expr(self.vars[name].named_children[-1], {})
        return self._cache[key]

    def call(self, name: str, *args):
        """Call a user-defined (or imported) function of this template."""
        return self._call_udf(name, list(args))

    def resource(self, symbol: str, *path: str, loop: dict | None = None):
        """The value of ``path`` inside a resource's (or module's) body; ``loop`` binds loop
        variables for a resource declared with ``[for ...]``."""
        decl = self.resources.get(symbol) or self.modules[symbol]
        body, _, _ = bicep._declaration_body(decl)
        node = body
        for key in path:
            props = {k: v for k, v, _ in object_properties(node)}
            if key not in props:
                return None
            node = props[key]
        return self.expr(node, dict(loop or {}))

    # --- expressions ---------------------------------------------------------------------------

    def expr(self, node: ts.Node, scope: dict, subst: dict | None = None):
        subst = subst or {}
        if node.id in subst:
            return self.expr(subst[node.id], scope, subst)
        t = node.type
        kids = node.named_children
        if t == "parenthesized_expression":
            return self.expr(kids[0], scope, subst)
        if t == "string":
            return self._string(node, scope, subst)
        if t == "number":
            return int(text(node))
        if t == "boolean":
            return text(node) == "true"
        if t == "null":
            return None
        if t == "array":
            return [self.expr(c, scope, subst) for c in kids]
        if t == "object":
            out = {}
            for p in (c for c in kids if c.type == "object_property"):
                key_node = p.named_children[0]
                key = (self.expr(key_node, scope, subst) if key_node.type == "string"
                       else text(key_node))
                out[key] = self.expr(p.named_children[-1], scope, subst)
            return out
        if t == "identifier":
            return self._name(text(node), scope)
        if t in ("unary_expression", "binary_expression", "member_expression",
                 "subscript_expression"):
            return self._chain(node, scope, subst)
        if t == "ternary_expression":
            cond = self.expr(kids[0], scope, subst)
            return self.expr(kids[1] if cond else kids[2], scope, subst)
        if t == "call_expression":
            return self._call(node, scope, subst)
        if t == "for_statement":
            return self._for(node, scope, subst)
        raise Unsupported(f"{bicep.pos(node)}: cannot evaluate a {t}: {text(node)[:60]}")

    def _string(self, node, scope, subst) -> str:
        if node.children and text(node.children[0]) == "'''":
            return "".join(text(c) for c in node.named_children)
        parts = []
        for c in node.named_children:
            if c.type == "string_content":
                parts.append(text(c))
            elif c.type == "escape_sequence":
                s = text(c)
                m = re.fullmatch(r"\\u\{([0-9A-Fa-f]+)\}", s)
                parts.append(chr(int(m.group(1), 16)) if m else ESCAPES[s])
            else:
                parts.append(_to_string(self.expr(c.named_children[0], scope, subst)))
        return "".join(parts)

    def _name(self, name: str, scope: dict):
        if name in scope:
            return scope[name]
        if UDF in scope and name not in self.imports:
            # a user-defined function sees only its own parameters (and imported symbols)
            raise Unsupported(f"{self.t.path.name}: a function cannot use {name!r}")
        if name in self.symbols:
            return self.symbols[name]
        if name in self.params:
            return self.param(name)
        if name in self.vars:
            return self.var(name)
        if name in self.imports:
            target, exported = self.imports[name]
            sub = Evaluator(target)
            return sub if exported is None else sub.var(exported)
        raise Unsupported(f"{self.t.path.name}: {name!r} is not something this evaluator knows "
                          "(give resources and modules as symbols)")

    # tree-sitter-bicep's precedences are not Bicep's: member access binds looser than the
    # operators (``x.a || x.b`` parses as ``(x.a || x).b``), comparison looser than ``||``
    # (``a || b == c`` as ``(a || b) == c``), ``!x.a`` as ``(!x).a``. So an operator chain is
    # flattened back into its tokens, in source order, and regrouped with Bicep's precedences.
    def _flatten(self, node, subst) -> list[tuple]:
        t = node.type
        if node.id in subst:
            return [("atom", node)]
        if t == "binary_expression":
            left, right = node.named_children
            op = next(c.type for c in node.children if not c.is_named)
            return self._flatten(left, subst) + [("op", op)] + self._flatten(right, subst)
        if t == "unary_expression":
            return [("prefix", node.children[0].type)] + self._flatten(node.named_children[0], subst)
        if t in ("member_expression", "subscript_expression"):
            obj, key = node.named_children[0], node.named_children[1]
            safe = any(c.type in (".?", "?") for c in node.children)
            return self._flatten(obj, subst) + [("suffix", key, t == "member_expression", safe)]
        return [("atom", node)]

    def _chain(self, node, scope, subst, trailing=()):
        operands, ops = [], []
        prefixes: list[str] = []
        for tok in self._flatten(node, subst) + list(trailing):
            if tok[0] == "prefix":
                prefixes.append(tok[1])
            elif tok[0] == "atom":
                operands.append([prefixes, tok[1], []])
                prefixes = []
            elif tok[0] == "suffix":
                operands[-1][2].append(tok)
            else:
                ops.append(tok[1])
        thunks = [self._operand(pre, atom, sfx, scope, subst) for pre, atom, sfx in operands]
        return self._group(thunks, ops)()

    def _operand(self, prefixes, atom, suffixes, scope, subst):
        def value():
            if atom.type == "ternary_expression" and suffixes and atom.id not in subst:
                cond, then, other = atom.named_children  # ``c ? a : b.p`` is ``c ? a : (b.p)``
                v = (self.expr(then, scope, subst) if self.expr(cond, scope, subst)
                     else self._chain(other, scope, subst, suffixes))
                rest = []
            elif (atom.type == "identifier" and text(atom) in self.imports and suffixes
                  and self.imports[text(atom)][1] is None):
                sub = Evaluator(self.imports[text(atom)][0])
                name = text(suffixes[0][1])
                v, rest = sub.var(name), suffixes[1:]
            else:
                v, rest = self.expr(atom, scope, subst), suffixes
            for _, key, is_member, safe in rest:
                v = self._index(v, text(key) if is_member else self.expr(key, scope, subst), safe)
            for op in reversed(prefixes):
                v = (not v) if op == "!" else -v
            return v
        return value

    def _group(self, thunks, ops):
        if not ops:
            return thunks[0]
        low = min(PRECEDENCE[o] for o in ops)
        i = max(k for k, o in enumerate(ops) if PRECEDENCE[o] == low)  # left-associative
        op = ops[i]
        left = self._group(thunks[:i + 1], ops[:i])
        right = self._group(thunks[i + 1:], ops[i + 1:])

        def coalesce():
            a = left()
            return a if a is not None else right()

        binary = {
            "&&": lambda: bool(left()) and bool(right()),
            "||": lambda: bool(left()) or bool(right()),
            "??": coalesce,
            "==": lambda: left() == right(), "!=": lambda: left() != right(),
            "=~": lambda: str(left()).lower() == str(right()).lower(),
            "!~": lambda: str(left()).lower() != str(right()).lower(),
            "<": lambda: left() < right(), "<=": lambda: left() <= right(),
            ">": lambda: left() > right(), ">=": lambda: left() >= right(),
            "+": lambda: left() + right(), "-": lambda: left() - right(),
            "*": lambda: left() * right(), "/": lambda: int(left() / right()),
            "%": lambda: left() % right(),
        }
        return binary[op]

    @staticmethod
    def _index(obj, key, safe=False):
        if obj is None and safe:
            return None
        if isinstance(obj, list):
            return obj[key]
        if isinstance(obj, dict):
            if key in obj:
                return obj[key]
            for k, v in obj.items():  # ARM property names are case-insensitive
                if isinstance(k, str) and isinstance(key, str) and k.lower() == key.lower():
                    return v
            if safe:
                return None
            raise Unsupported(f"no property {key!r} in {sorted(obj)[:10]}")
        if isinstance(obj, str):
            return obj[key]
        raise Unsupported(f"cannot index {type(obj).__name__} with {key!r}")

    def _for(self, node, scope, subst):
        kids = node.named_children
        head = kids[0]
        if head.type == "for_loop_parameters":
            names = [text(c) for c in head.named_children]
            source = kids[1]
        else:
            names = [text(head)]
            source = kids[1]
        body = kids[-1]
        out = []
        for i, item in enumerate(self.expr(source, scope, subst)):
            inner = dict(scope, **{names[0]: item})
            if len(names) > 1:
                inner[names[1]] = i
            if body.type == "if_statement":
                cond, obj = body.named_children[0], body.named_children[-1]
                if not self.expr(cond, inner, subst):
                    continue
                out.append(self.expr(obj, inner, subst))
            else:
                out.append(self.expr(body, inner, subst))
        return out

    # --- calls ---------------------------------------------------------------------------------

    def _call(self, node, scope, subst):
        fn_node, args_node = node.named_children[0], node.named_children[1]
        name = text(fn_node)
        name = name.removeprefix("sys.")
        arg_nodes = list(args_node.named_children)
        if name in LAMBDA_FUNCTIONS:
            values = [self._closure(a, scope, subst) if _left_spine_lambda(a) is not None
                      else self.expr(a, scope, subst) for a in arg_nodes]
            return LAMBDA_FUNCTIONS[name](self, *values)
        if name in LOADERS:
            ref = bicep.string_value(arg_nodes[0])
            return LOADERS[name]((self.t.path.parent / ref).resolve())
        if name == "fail":
            raise BicepFail(self.expr(arg_nodes[0], scope, subst))
        args = [self.expr(a, scope, subst) for a in arg_nodes]
        if "." in name:
            alias, fname = name.split(".", 1)
            if alias in self.imports and self.imports[alias][1] is None:
                return Evaluator(self.imports[alias][0])._call_udf(fname, args)
        if name in self.funcs or (name in self.imports and self.imports[name][1] is not None):
            return self._call_udf(name, args)
        if name == "resourceGroup":
            if not args:
                return self.rg
            sub = args[0] if len(args) == 2 else self.rg["id"].split("/")[2]
            return {"id": f"/subscriptions/{sub}/resourceGroups/{args[-1]}", "name": args[-1],
                    "subscriptionId": sub}
        if name == "tenant":
            return {"tenantId": "11111111-1111-1111-1111-111111111111"}
        if name == "resourceId":
            rtype, names = args[0], args[1:]
            segs = rtype.split("/")
            path = segs[0] + "/" + "/".join(f"{s}/{n}" for s, n in zip(segs[1:], names))
            return f"{self.rg['id']}/providers/{path}"
        if name == "subscriptionResourceId":
            sub = self.rg["id"].split("/resourceGroups/")[0]
            return f"{sub}/providers/{args[0]}/{'/'.join(args[1:])}"
        if name in BUILTINS:
            return BUILTINS[name](*args)
        raise Unsupported(f"function {name}()")

    def _closure(self, node, scope, subst) -> Closure:
        lam = _left_spine_lambda(node)
        head = lam.named_children[0]
        if head.type == "identifier":
            params = (text(head),)
        else:
            params = tuple(text(c) for c in head.named_children if c.type == "identifier")
        return Closure(params, node, lam, dict(scope))

    def apply(self, closure: Closure, *args):
        scope = dict(closure.scope, **dict(zip(closure.params, args)))
        body = closure.lam.named_children[-1]
        return self.expr(closure.node, scope, {closure.lam.id: body})

    def _call_udf(self, name: str, args: list):
        if name not in self.funcs and name in self.imports:
            target, exported = self.imports[name]
            return Evaluator(target)._call_udf(exported, args)
        decl = self.funcs[name]
        params_node = next(c for c in decl.named_children if c.type == "parameters")
        names = [text(p.named_children[0]) for p in params_node.named_children]
        if len(names) != len(args):
            raise Unsupported(f"{name}() takes {len(names)} arguments, got {len(args)}")
        return self.expr(decl.named_children[-1], dict(zip(names, args), **{UDF: name}))


def _to_string(v) -> str:
    """ARM's string(): strings unchanged, JSON (compact) for objects and arrays."""
    if isinstance(v, str):
        return v
    if isinstance(v, bool):
        return "True" if v else "False"
    if v is None:
        return ""
    if isinstance(v, (dict, list)):
        return json.dumps(v, separators=(",", ":"), ensure_ascii=False)
    return str(v)


def _union(*items):
    if all(isinstance(i, dict) for i in items):
        out: dict = {}
        for item in items:
            for k, v in item.items():
                out[k] = _union(out[k], v) if isinstance(out.get(k), dict) and isinstance(v, dict) else v
        return out
    out = []
    for item in items:
        for v in item:
            if v not in out:
                out.append(v)
    return out


def _format(fmt: str, *args) -> str:
    def sub(m):
        if m.group(0) in ("{{", "}}"):
            return m.group(0)[0]
        return _to_string(args[int(m.group(1))])
    return re.sub(r"\{\{|\}\}|\{(\d+)\}", sub, fmt)


def _contains(container, item) -> bool:
    if isinstance(container, str):
        return item in container
    if isinstance(container, dict):
        return any(k.lower() == str(item).lower() for k in container)
    return item in container


def _unique_string(*args) -> str:
    digest = hashlib.sha256("-".join(args).encode()).digest()
    return base64.b32encode(digest).decode().lower()[:13]


BUILTINS = {
    "format": _format,
    "replace": lambda s, old, new: s.replace(old, new),
    "base64": lambda s: base64.b64encode(s.encode()).decode(),
    "base64ToString": lambda s: base64.b64decode(s).decode(),
    "string": _to_string,
    "int": int,
    "bool": lambda v: v if isinstance(v, bool) else str(v).lower() == "true",
    "json": json.loads,
    "empty": lambda v: v is None or len(v) == 0,
    "length": len,
    "contains": _contains,
    "startsWith": lambda s, p: s.lower().startswith(p.lower()),
    "endsWith": lambda s, p: s.lower().endswith(p.lower()),
    "indexOf": lambda s, p: s.lower().find(p.lower()),
    "toLower": str.lower,
    "toUpper": str.upper,
    "trim": str.strip,
    "split": lambda s, d: re.split("|".join(map(re.escape, d if isinstance(d, list) else [d])), s),
    "join": lambda a, d: d.join(_to_string(x) for x in a),
    "first": lambda a: a[0] if a else None,
    "last": lambda a: a[-1] if a else None,
    "take": lambda a, n: a[:n],
    "skip": lambda a, n: a[n:],
    "concat": lambda *a: "".join(a) if all(isinstance(x, str) for x in a) else [
        x for part in a for x in part],
    "union": _union,
    "range": lambda start, count: list(range(start, start + count)),
    "min": lambda *a: min(a[0]) if len(a) == 1 and isinstance(a[0], list) else min(a),
    "max": lambda *a: max(a[0]) if len(a) == 1 and isinstance(a[0], list) else max(a),
    "substring": lambda s, start, n=None: s[start:] if n is None else s[start:start + n],
    "items": lambda o: [{"key": k, "value": o[k]} for k in sorted(o, key=str.lower)],
    "guid": lambda *a: str(uuid.uuid5(GUID_NAMESPACE, "-".join(a))),
    "uniqueString": _unique_string,
    "any": lambda v: v,
}

LAMBDA_FUNCTIONS = {
    "map": lambda ev, arr, f: [ev.apply(f, x) for x in arr],
    "filter": lambda ev, arr, f: [x for x in arr if ev.apply(f, x)],
    "toObject": lambda ev, arr, k, v=None: {ev.apply(k, x): (ev.apply(v, x) if v else x)
                                             for x in arr},
}

LOADERS = {
    "loadTextContent": lambda p: p.read_text("utf-8"),
    "loadJsonContent": lambda p: json.loads(p.read_text("utf-8")),
    "loadFileAsBase64": lambda p: base64.b64encode(p.read_bytes()).decode(),
}
