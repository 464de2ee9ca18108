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

import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import tree_sitter as ts

from . import syntax as bicep
from .functions import BUILTINS, LAMBDA_FUNCTIONS, LOADERS, to_string
from .syntax import declaration_body, object_properties, text


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
PRECEDENCE = {
    "??": 1,
    "||": 2,
    "&&": 3,
    "==": 4,
    "!=": 4,
    "=~": 4,
    "!~": 4,
    "<": 5,
    "<=": 5,
    ">": 5,
    ">=": 5,
    "+": 6,
    "-": 6,
    "*": 7,
    "/": 7,
    "%": 7,
}
UDF = "<user-defined function>"  # scope marker: no access to the template's names


@dataclass
class Template:
    path: Path
    tree: ts.Tree

    def declarations(self, kind: str) -> dict[str, ts.Node]:
        return {
            text(d.named_children[0]): d
            for d in self.tree.root_node.named_children
            if d.type == kind
        }


def template(path: Path) -> Template:
    """The parsed file, parsed again only when it changed (tests write templates too)."""
    stat = path.stat()
    return _parsed(path, stat.st_mtime_ns, stat.st_size)


@cache
def _parsed(path: Path, mtime_ns: int, size: int) -> Template:
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
        if (
            n.type
            in (
                "member_expression",
                "subscript_expression",
                "binary_expression",
                "ternary_expression",
            )
            and n.named_children
        ):
            n = n.named_children[0]
        else:
            return None
    return None


class Evaluator:
    def __init__(
        self,
        path: Path,
        params: dict | None = None,
        symbols: dict | None = None,
        resource_group: dict | None = None,
        deployment: str = "deploy-test",
    ) -> None:
        self.t = template(Path(path).resolve())
        self.deployment_name = deployment
        self.given = dict(params or {})
        self.symbols = dict(symbols or {})
        self.rg = resource_group or {
            "id": "/subscriptions/00000000-0000-0000-0000-000000000000/resourceGroups/rg-test",
            "name": "rg-test",
            "location": "westeurope",
        }
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
            target = (
                self.t.path.parent
                / bicep.string_value(next(c for c in d.named_children if c.type == "string"))
            ).resolve()
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
        for key, test in (
            ("minValue", lambda v, n: v >= n),
            ("maxValue", lambda v, n: v <= n),
            ("minLength", lambda v, n: len(v) >= n),
            ("maxLength", lambda v, n: len(v) <= n),
        ):
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
        body, _, _ = declaration_body(decl)
        node = body
        for key in path:
            props = {k: v for k, v, _ in object_properties(node)}
            if key not in props:
                return None
            node = props[key]
        return self.expr(node, dict(loop or {}))

    def module(
        self, symbol: str, symbols: dict | None = None, loop: dict | None = None
    ) -> Evaluator:
        """The module's own template with the parameters this one gives it, every one checked
        against the module's decorators (ParamRejected, as ARM refuses the nested deployment)."""
        decl = self.modules[symbol]
        ref = bicep.string_value(next(c for c in decl.named_children if c.type == "string"))
        given = self.resource(symbol, "params", loop=loop) or {}
        inner = Evaluator(self.t.path.parent / ref, given, symbols, self.rg, self.deployment_name)
        for name in given:
            inner.param(name)
        return inner

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
            return self._array(node, scope, subst)
        if t == "object":
            out = {}
            for p in (c for c in kids if c.type == "object_property"):
                key_node = p.named_children[0]
                key = (
                    self.expr(key_node, scope, subst)
                    if key_node.type == "string"
                    else text(key_node)
                )
                out[key] = self.expr(p.named_children[-1], scope, subst)
            return out
        if t == "identifier":
            return self._name(text(node), scope)
        if t in (
            "unary_expression",
            "binary_expression",
            "member_expression",
            "subscript_expression",
        ):
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
        return "".join(
            p if isinstance(p, str) else to_string(self.expr(p, scope, subst))
            for p in bicep.string_parts(node)
        )

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
        raise Unsupported(
            f"{self.t.path.name}: {name!r} is not something this evaluator knows "
            "(give resources and modules as symbols)"
        )

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
            return [*self._flatten(left, subst), ("op", op), *self._flatten(right, subst)]
        if t == "unary_expression":
            return [
                ("prefix", node.children[0].type),
                *self._flatten(node.named_children[0], subst),
            ]
        if t in ("member_expression", "subscript_expression"):
            obj, key = node.named_children[0], node.named_children[1]
            safe = any(c.type in (".?", "?") for c in node.children)
            return [*self._flatten(obj, subst), ("suffix", key, t == "member_expression", safe)]
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
                v = (
                    self.expr(then, scope, subst)
                    if self.expr(cond, scope, subst)
                    else self._chain(other, scope, subst, suffixes)
                )
                rest = []
            elif (
                atom.type == "identifier"
                and text(atom) in self.imports
                and suffixes
                and self.imports[text(atom)][1] is None
            ):
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
        left = self._group(thunks[: i + 1], ops[:i])
        right = self._group(thunks[i + 1 :], ops[i + 1 :])

        def coalesce():
            a = left()
            return a if a is not None else right()

        binary = {
            "&&": lambda: bool(left()) and bool(right()),
            "||": lambda: bool(left()) or bool(right()),
            "??": coalesce,
            "==": lambda: left() == right(),
            "!=": lambda: left() != right(),
            "=~": lambda: str(left()).lower() == str(right()).lower(),
            "!~": lambda: str(left()).lower() != str(right()).lower(),
            "<": lambda: left() < right(),
            "<=": lambda: left() <= right(),
            ">": lambda: left() > right(),
            ">=": lambda: left() >= right(),
            "+": lambda: left() + right(),
            "-": lambda: left() - right(),
            "*": lambda: left() * right(),
            "/": lambda: int(left() / right()),
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

    def _array(self, node, scope, subst) -> list:
        """tree-sitter-bicep parses ``[f(x), y]`` (one line, a call first) as the items ``f``,
        ``(x)``, ``y``: an identifier right before a parenthesized expression, with no comma
        between them, is that call."""
        kids, out, i = node.children, [], 0
        while i < len(kids):
            c = kids[i]
            if (
                c.type == "identifier"
                and i + 1 < len(kids)
                and kids[i + 1].type == "parenthesized_expression"
            ):
                out.append(self._call_named(text(c), kids[i + 1].named_children, scope, subst))
                i += 2
                continue
            if c.is_named:
                out.append(self.expr(c, scope, subst))
            i += 1
        return out

    def _call(self, node, scope, subst):
        fn_node, args_node = node.named_children[0], node.named_children[1]
        return self._call_named(text(fn_node), list(args_node.named_children), scope, subst)

    def _call_named(self, name: str, arg_nodes: list, scope, subst):
        name = name.removeprefix("sys.")
        if name in LAMBDA_FUNCTIONS:
            values = [
                self._closure(a, scope, subst)
                if _left_spine_lambda(a) is not None
                else self.expr(a, scope, subst)
                for a in arg_nodes
            ]
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
            return {
                "id": f"/subscriptions/{sub}/resourceGroups/{args[-1]}",
                "name": args[-1],
                "subscriptionId": sub,
            }
        if name == "subscription":
            sub = self.rg["id"].split("/")[2]
            return {
                "id": f"/subscriptions/{sub}",
                "subscriptionId": sub,
                "tenantId": "11111111-1111-1111-1111-111111111111",
            }
        if name == "tenant":
            return {"tenantId": "11111111-1111-1111-1111-111111111111"}
        if name == "deployment":
            return {"name": self.deployment_name}
        if name == "resourceId":
            rtype, names = args[0], args[1:]
            segs = rtype.split("/")
            path = (
                segs[0] + "/" + "/".join(f"{s}/{n}" for s, n in zip(segs[1:], names, strict=False))
            )
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
        scope = dict(closure.scope, **dict(zip(closure.params, args, strict=False)))
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
        return self.expr(
            decl.named_children[-1], dict(zip(names, args, strict=False), **{UDF: name})
        )
