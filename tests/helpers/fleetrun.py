"""Run the project's queries on a fleet the way Azure would: library queries as pasted, workbook
items with their time context and parameters (se_forwarder.report substitutes them as the portal
does), alert rules at an evaluation moment with the window and query range of alerts.bicep."""

from __future__ import annotations

import copy
import json
import re
import weakref
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import cache
from typing import Any

import bicep_eval as bicep

from se_forwarder.report import Engine, TimeRange, declared
from se_forwarder.report.kql.engine import as_utc
from se_forwarder.report.kql.params import saved_value

from .infra import workbooks
from .infra.paths import DASHBOARDS, INFRA, QUERIES, WORKBOOK_QUERIES

ALERTS_BICEP = INFRA / "modules" / "alerts.bicep"


# Rows already computed, per engine: tests of one module share a fleet's engine and several
# evaluate the same rule at the same moments (an evaluation is ~0.5 s of CPU: planning ~100 kB of
# SQL). Keyed by everything ``Engine.run`` reads, the engine's tables included (``counts``: a
# table loaded later is another key); each caller gets its own copy of the rows.
_RAN: weakref.WeakKeyDictionary[Engine, dict[str, list[dict]]] = weakref.WeakKeyDictionary()


def _key(engine: Engine, *parts: Any) -> str:
    """A memo's key: ``parts`` and what the engine answers them from (its moment, its tables)."""
    return json.dumps([*parts, engine.now, sorted(engine.counts.items())], default=repr)


def run(engine: Engine, query: str, params: dict | None = None, **kw: Any) -> list[dict]:
    """``engine.run``, computed once per engine for the same query, values and moment."""
    key = _key(engine, query, params, kw)
    ran = _RAN.setdefault(engine, {})
    if key not in ran:
        ran[key] = engine.run(query, params, **kw)
    return copy.deepcopy(ran[key])


def library(engine: Engine, name: str, **kw: Any) -> list[dict]:
    """A library query (dashboards/queries/<name>), as pasted into Log Analytics."""
    return run(engine, (QUERIES / name).read_text("utf-8"), **kw)


@cache
def _workbook(key: str) -> tuple[dict, dict[str, dict]]:
    wb = workbooks.load(DASHBOARDS / f"{key}.workbook.json")
    return wb, declared(wb)


def item_span(key: str, name: str, values: dict | None = None) -> timedelta:
    """The time range the portal gives an item: its own, or the TimeRange parameter's."""
    wb, params = _workbook(key)
    for _, item in workbooks.walk_items(wb["items"]):
        if item.get("name") == name:
            content = item["content"]
            if "timeContext" in content:
                return timedelta(milliseconds=content["timeContext"]["durationMs"])
            prm = content.get("timeContextFromParameter")
            if prm:
                value = (values or {}).get(prm) or saved_value(params[prm])
                return value.duration
            return None
    if name in params:  # a query-backed parameter
        prm = params[name].get("timeContextFromParameter")
        return saved_value(params[prm]).duration if prm else None
    raise KeyError(name)


def library_at(
    engine: Engine, name: str, times: Iterable[datetime], timespan: timedelta | None = None
) -> dict[datetime, list[dict]]:
    """``library`` at each of ``times``, planned together (``Engine.run_at``): rows in no
    particular order within a moment."""
    return _at(engine, (QUERIES / name).read_text("utf-8"), list(times), timespan)


def workbook(engine: Engine, path: str, values: dict | None = None, **kw: Any) -> list[dict]:
    """A workbook query from its .kql file (``agent-health/fleet.kql``), with the item's time
    context and the workbook's parameters (their saved values unless ``values`` says)."""
    query, params, span = _workbook_item(path, values)
    kw.setdefault("timespan", span)
    return run(engine, query, values, declared=params, **kw)


def workbook_at(
    engine: Engine, path: str, times: Iterable[datetime], values: dict | None = None
) -> dict[datetime, list[dict]]:
    """``workbook`` at each of ``times``, planned together (``Engine.run_at``, the parameters
    substituted at each moment): rows in no particular order within a moment."""
    query, params, span = _workbook_item(path, values)
    return _at(engine, query, list(times), span, values, params)


def _workbook_item(path: str, values: dict | None) -> tuple[str, dict, timedelta | None]:
    """A workbook item's query, its workbook's parameters and the item's time range."""
    file = WORKBOOK_QUERIES / path
    key = path.split("/")[0]
    return (
        workbooks.generator().query_of(file),
        _workbook(key)[1],
        item_span(key, file.stem, values),
    )


def grain(g: str, days: int = 7) -> dict:
    n, unit = int(g[:-1]), g[-1]
    return {
        "TimeRange": TimeRange(
            timedelta(days=days),
            timedelta(**{{"m": "minutes", "h": "hours", "d": "days"}[unit]: n}),
        )
    }


# -- alert rules ----------------------------------------------------------------------------------


_ISO = re.compile(r"P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?)?")


def duration(iso: str) -> timedelta:
    d, h, m = (int(x or 0) for x in _ISO.fullmatch(iso).groups())
    return timedelta(days=d, hours=h, minutes=m)


@dataclass(frozen=True)
class Rule:
    key: str
    query: str
    frequency: timedelta
    window: timedelta
    query_range: timedelta  # overrideQueryTimeRange, else the window
    resource: str
    dimensions: tuple[str, ...]
    measure: str
    threshold: float

    def identities(self, rows: list[dict]) -> set[tuple]:
        """The alerts a result raises: one per resource and dimension values whose measure
        (Count of rows, or the Maximum of the measure column) crosses the threshold."""
        groups: dict[tuple, list[dict]] = {}
        for r in rows:
            k = (r[self.resource] if self.resource else None, *tuple(r[d] for d in self.dimensions))
            groups.setdefault(k, []).append(r)
        out = set()
        for k, rs in groups.items():
            value = max(r[self.measure] for r in rs) if self.measure else len(rs)
            if value > self.threshold:
                out.add(k)
        return out


@cache
def rules() -> dict[str, Rule]:
    tree = bicep.parse(ALERTS_BICEP.read_bytes())
    out = {}
    for r in bicep.literal_value(bicep.variables(tree)["allRules"], ALERTS_BICEP.parent):
        window = duration(r["windowSize"])
        out[r["key"]] = Rule(
            r["key"],
            r["query"].path.read_text("utf-8"),
            duration(r["frequency"]),
            window,
            duration(r["overrideQueryTimeRange"]) if r["overrideQueryTimeRange"] else window,
            r["resourceIdColumn"],
            tuple(r["dimensions"]),
            r["metricMeasureColumn"],
            _number(r["threshold"]),
        )
    return out


def _number(value: Any) -> float:
    """A literal, or a parameter's default value (``param name int = 5``)."""
    if isinstance(value, (int, float)):
        return float(value)
    m = re.search(rf"param {re.escape(value.source)} int = (\d+)", ALERTS_BICEP.read_text("utf-8"))
    return float(m.group(1))


@cache
def cap_lines() -> tuple[str, str]:
    """alerts.bicep's ``capDefaults``: the lines of a query it replaces with the rule's cap
    (maxAlertsPerRule) and the workspace's id."""
    tree = bicep.parse(ALERTS_BICEP.read_bytes())
    limit, workspace = bicep.literal_value(
        bicep.variables(tree)["capDefaults"], ALERTS_BICEP.parent
    )
    return limit, workspace


def evaluate(
    engine: Engine,
    key: str,
    moment: datetime,
    *,
    max_alerts: int | None = None,
    workspace: str | None = None,
) -> list[dict]:
    """The rule's query at one evaluation: its query time range ending at ``moment``; with
    ``max_alerts`` and (a rule raised on resources) ``workspace`` put in its cap lines as
    alerts.bicep does."""
    rule = rules()[key]
    query = rule.query
    limit, ws = cap_lines()
    if max_alerts is not None:
        assert limit in query, f"{key}: no {limit!r}"
        query = query.replace(limit, re.sub(r"\d+", str(max_alerts), limit))
    if workspace is not None and rule.resource:  # a rule raised on resources
        assert ws in query, f"{key}: no {ws!r}"
        query = query.replace(ws, ws.replace('""', f'"{workspace}"'))
    return run(engine, query, now=moment, timespan=rule.query_range)


# The rows of evaluations made together (``Engine.run_at``), per engine: unordered within a moment,
# so kept apart from ``run``'s, which keep the query's own order.
_AT: weakref.WeakKeyDictionary[Engine, dict[str, list[dict]]] = weakref.WeakKeyDictionary()


def evaluate_at(engine: Engine, key: str, times: Iterable[datetime]) -> dict[datetime, list[dict]]:
    """``evaluate`` at each of ``times``, planned together (``Engine.run_at``: one query for
    all of them): rows in no particular order within a moment, which is all an alert's
    identities need."""
    rule = rules()[key]
    return _at(engine, rule.query, list(times), rule.query_range)


def _at(
    engine: Engine,
    query: str,
    times: list[datetime],
    timespan: timedelta | None,
    params: dict | None = None,
    declared: dict | None = None,
) -> dict[datetime, list[dict]]:
    """``Engine.run_at`` for the moments not yet made on this engine, each caller's own copy."""
    made = _AT.setdefault(engine, {})
    keys = {t: _key(engine, query, t, timespan, params) for t in times}
    missing = [t for t, k in keys.items() if k not in made]
    if missing:
        got = engine.run_at(query, missing, timespan=timespan, params=params, declared=declared)
        for t in missing:
            made[keys[t]] = got[as_utc(t)]
    return {t: copy.deepcopy(made[k]) for t, k in keys.items()}


def moments(rule: Rule, start: datetime, end: datetime) -> list[datetime]:
    """Evaluation times from ``start`` to ``end``, every ``frequency`` (aligned to it)."""
    step = rule.frequency
    t = datetime.min + ((start - datetime.min) // step) * step
    out = []
    while t <= end:
        if t >= start:
            out.append(t)
        t += step
    return out
