"""ARM's template functions as this project uses them (string(), guid(), uniqueString(), ...),
the lambda functions and the load*() functions, in Python."""

from __future__ import annotations

import base64
import hashlib
import json
import re
import uuid

# ARM's guid() is a name-based (v5) UUID in this namespace over the arguments joined by '-'.
GUID_NAMESPACE = uuid.UUID("11fb06fb-712d-4ddd-98c7-e71bbd588830")


def to_string(v) -> str:
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
                out[k] = (
                    _union(out[k], v) if isinstance(out.get(k), dict) and isinstance(v, dict) else v
                )
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
        return to_string(args[int(m.group(1))])

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
    "string": to_string,
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
    "join": lambda a, d: d.join(to_string(x) for x in a),
    "first": lambda a: a[0] if a else None,
    "last": lambda a: a[-1] if a else None,
    "take": lambda a, n: a[:n],
    "skip": lambda a, n: a[n:],
    "concat": lambda *a: (
        "".join(a) if all(isinstance(x, str) for x in a) else [x for part in a for x in part]
    ),
    "union": _union,
    "flatten": lambda a: [x for part in a for x in part],
    "range": lambda start, count: list(range(start, start + count)),
    "min": lambda *a: min(a[0]) if len(a) == 1 and isinstance(a[0], list) else min(a),
    "max": lambda *a: max(a[0]) if len(a) == 1 and isinstance(a[0], list) else max(a),
    "substring": lambda s, start, n=None: s[start:] if n is None else s[start : start + n],
    "items": lambda o: [{"key": k, "value": o[k]} for k in sorted(o, key=str.lower)],
    "guid": lambda *a: str(uuid.uuid5(GUID_NAMESPACE, "-".join(a))),
    "uniqueString": _unique_string,
    "any": lambda v: v,
}

LAMBDA_FUNCTIONS = {
    "map": lambda ev, arr, f: [ev.apply(f, x) for x in arr],
    "filter": lambda ev, arr, f: [x for x in arr if ev.apply(f, x)],
    "toObject": lambda ev, arr, k, v=None: {
        ev.apply(k, x): (ev.apply(v, x) if v else x) for x in arr
    },
}

LOADERS = {
    "loadTextContent": lambda p: p.read_text("utf-8"),
    "loadJsonContent": lambda p: json.loads(p.read_text("utf-8")),
    "loadFileAsBase64": lambda p: base64.b64encode(p.read_bytes()).decode(),
}
