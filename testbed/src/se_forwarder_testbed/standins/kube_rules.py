"""The API server's rules the Kubernetes stand-in applies (``kube_cluster.py`` says which): a
``Status`` failure, merge patches (RFC 7386 and strategic-merge lists), label selectors, budget
arithmetic and event validation."""

from __future__ import annotations

import copy
import math
from typing import Any


class ApiFailure(Exception):
    """A ``Status`` answer (``code``, ``reason``, ``message``, ``details``)."""

    def __init__(
        self, code: int, reason: str, message: str, details: dict[str, Any] | None = None
    ) -> None:
        super().__init__(message)
        self.code, self.reason, self.message, self.details = code, reason, message, details

    def status(self) -> dict[str, Any]:
        out = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "code": self.code,
        }
        if self.reason:  # eviction.go's 500 for several budgets has none
            out["reason"] = self.reason
        if self.details is not None:
            out["details"] = self.details
        return out


def not_found(kind: str, name: str) -> ApiFailure:
    return ApiFailure(404, "NotFound", f'{kind} "{name}" not found', {"name": name, "kind": kind})


def merge_patch(target: Any, patch: Any, merge_keys: dict[str, str] | None = None) -> Any:
    """RFC 7386, plus the strategic-merge lists named in ``merge_keys`` (a path to the key the
    list merges by, e.g. ``{"status.conditions": "type"}``)."""
    return _merge(target, patch, merge_keys or {}, "")


def _merge(target: Any, patch: Any, keys: dict[str, str], path: str) -> Any:
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        here = f"{path}.{k}" if path else k
        if v is None:
            out.pop(k, None)
        elif here in keys and isinstance(v, list):
            out[k] = _merge_list(out.get(k) or [], v, keys[here])
        else:
            out[k] = _merge(out.get(k), v, keys, here)
    return out


def _merge_list(old: list[Any], new: list[Any], key: str) -> list[Any]:
    merged = [copy.deepcopy(i) for i in old]
    for item in new:
        at = next((i for i, o in enumerate(merged) if o.get(key) == item.get(key)), None)
        if at is None:
            merged.append(copy.deepcopy(item))
        else:
            merged[at] = _merge(merged[at], item, {}, "")
    return merged


def ready(pod: dict[str, Any]) -> bool:
    conds = pod.get("status", {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conds)


def matches(selector: dict[str, Any], labels: dict[str, Any]) -> bool:
    return all(labels.get(k) == v for k, v in (selector.get("matchLabels") or {}).items())


def count(value: int | str, expected: int) -> int:
    if isinstance(value, str) and value.endswith("%"):
        return math.ceil(int(value[:-1]) * expected / 100)
    return int(value)


def required(group: str) -> tuple[str, ...]:
    if group:
        return (
            "regarding.kind",
            "regarding.name",
            "reason",
            "action",
            "eventTime",
            "reportingController",
            "reportingInstance",
        )
    return ("involvedObject.kind", "involvedObject.name", "reason", "message")


def get(body: dict[str, Any], dotted: str) -> Any:
    cur: Any = body
    for part in dotted.split("."):
        cur = cur.get(part) if isinstance(cur, dict) else None
    return cur
