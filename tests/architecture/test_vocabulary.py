"""One vocabulary: in the agent's package (``src/se_forwarder``; not ``report/``, which never runs
on a VM, nor the collector, which reads Azure's own words) a phase, an event status or a hook's
state is named through its ``StrEnum`` (``model.Phase``, ``model.EventStatus``,
``hooks.HookState``, ``health.HealthState``; the sinks' ``Verdict`` was one already), never as a
bare string; times are parsed only in ``timefmt`` and VM names
compared only through ``model.vm_name_key``."""

from __future__ import annotations

import ast

import pytest
from test_layout import rel, sources

from se_forwarder.health import HealthState
from se_forwarder.hooks import HookState
from se_forwarder.model import EventStatus, Phase

WORDS = {str(w) for w in (*Phase, *EventStatus)}
# "ok", "error", "stopped" are words of every room: a hook's states are checked in hooks/ only,
# what `status` says in health/ and the status command
ROOM_WORDS = {
    "se_forwarder.hooks.": {str(w) for w in HookState},
    "se_forwarder.health.": {str(w) for w in HealthState},
    "se_forwarder.commands.status": {str(w) for w in HealthState},
    # the collector reads Azure's words, but how `status` judges it is said in ours
    "se_forwarder.collector.status": {str(w) for w in HealthState},
}
# where the words are declared
HOMES = {"se_forwarder.model", "se_forwarder.hooks.states", "se_forwarder.health.rules"}
TIME_PARSERS = {"fromisoformat", "parsedate_to_datetime", "parsedate", "parsedate_tz", "strptime"}
TIME_HOME = "se_forwarder.timefmt"


def _agent_modules():
    for name, (path, tree) in sources().items():
        if name.startswith("se_forwarder.") and not name.startswith(
            ("se_forwarder.report", "se_forwarder.commands.report", "se_forwarder.collector")
        ):
            yield name, path, tree


def _docstrings(tree: ast.Module) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if (
            isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
            and node.body
            and isinstance(node.body[0], ast.Expr)
            and isinstance(node.body[0].value, ast.Constant)
        ):
            ids.add(id(node.body[0].value))
    return ids


def bare_words(tree: ast.Module, words: set[str] = WORDS) -> list[tuple[int, str]]:
    """String constants that are one of ``words`` (docstrings and dict keys, which name fields,
    aside)."""
    skip = _docstrings(tree) | {
        id(k) for n in ast.walk(tree) if isinstance(n, ast.Dict) for k in n.keys
    }
    return [
        (n.lineno, n.value)
        for n in ast.walk(tree)
        if isinstance(n, ast.Constant)
        and isinstance(n.value, str)
        and n.value in words
        and id(n) not in skip
    ]


def time_parsing(tree: ast.Module) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in TIME_PARSERS
        ):
            found.append((node.lineno, ast.unparse(node.func)))
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in TIME_PARSERS
        ):
            found.append((node.lineno, node.func.id))
    return found


def name_folding(tree: ast.Module) -> list[tuple[int, str]]:
    """``x.lstrip("_")`` (the old api-versions' VM-name prefix) outside ``vm_name_key``."""
    return [
        (n.lineno, ast.unparse(n))
        for n in ast.walk(tree)
        if isinstance(n, ast.Call)
        and isinstance(n.func, ast.Attribute)
        and n.func.attr == "lstrip"
        and n.args
        and isinstance(n.args[0], ast.Constant)
        and n.args[0].value == "_"
    ]


def test_phases_statuses_and_hook_states_are_named_through_their_enums():
    found = [
        f"{rel(path)}:{line}: {word!r}"
        for name, path, tree in _agent_modules()
        if name not in HOMES
        for line, word in bare_words(tree)
    ]
    found += [
        f"{rel(path)}:{line}: {word!r}"
        for name, (path, tree) in sources().items()
        for room, words in ROOM_WORDS.items()
        if name.startswith(room) and name not in HOMES
        for line, word in bare_words(tree, words)
    ]
    assert found == []


def test_times_are_parsed_in_timefmt_only():
    found = [
        f"{rel(path)}:{line}: {text}"
        for name, path, tree in _agent_modules()
        if name != TIME_HOME
        for line, text in time_parsing(tree)
    ]
    assert found == []


def test_vm_names_are_compared_through_one_rule():
    found = [
        f"{rel(path)}:{line}: {text}"
        for name, path, tree in _agent_modules()
        if name != "se_forwarder.model"
        for line, text in name_folding(tree)
    ]
    assert found == []


def test_a_hook_that_started_is_not_an_event_that_started():
    assert HookState.STARTED != EventStatus.STARTED
    assert Phase.STARTED == EventStatus.STARTED == "Started"  # the contract's spelling


@pytest.mark.parametrize(
    "code, check",
    [
        ('if r.Phase == "Removed": pass', bare_words),
        ('status = ["Scheduled"]', bare_words),
        ("dt = datetime.fromisoformat(text)", time_parsing),
        ("dt = parsedate_to_datetime(value)", time_parsing),
        ('me = name.lstrip("_").lower()', name_folding),
    ],
)
def test_the_checks_catch_what_they_are_for(code, check):
    assert check(ast.parse(code)) != []


def test_the_room_checks_catch_a_bare_hook_or_health_state():
    assert (
        bare_words(ast.parse('state = {"state": "started"}'), ROOM_WORDS["se_forwarder.hooks."])
        != []
    )
    assert bare_words(ast.parse('v.state = "unhealthy"'), ROOM_WORDS["se_forwarder.health."]) != []


# -- one name per concept -------------------------------------------------------------------------

# Classes named alike in the agent's package that are still to be told apart (each a different
# concept; renamed when their package is next worked on): none may be added.
SAME_NAME_TO_MEND = {
    "Cell": {"se_forwarder.report.render.page", "se_forwarder.report.render.panels"},
    "Store": {"se_forwarder.outbox.store", "se_forwarder.report.kql.tables"},
    "Table": {"se_forwarder.report.render.panels", "se_forwarder.sinks.answers"},
    "Target": {"se_forwarder.collector.arm", "se_forwarder.report.kql.load"},
}


def _names(kind: type, pick) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for name, (_, tree) in sources().items():
        if name == "se_forwarder" or name.startswith("se_forwarder."):
            for node in tree.body:
                if isinstance(node, kind) and pick(node):
                    found.setdefault(node.name, set()).add(name)
    return {k: v for k, v in found.items() if len(v) > 1}


def test_one_class_name_per_concept():
    """A ``Verdict`` of delivery and a ``Verdict`` of health, an ``Answer`` of a sink and one of
    IMDS, three ``Column``s: one name each now (``health.Assessment``, ``imds.ImdsReply``,
    ``HeartbeatColumn``, ``GridColumn``)."""
    assert _names(ast.ClassDef, lambda n: True) == SAME_NAME_TO_MEND


def test_text_is_put_on_one_line_in_one_place():
    assert _names(ast.FunctionDef, lambda n: n.name.lstrip("_") == "one_line") == {}
    homes = {
        name
        for name, (_, tree) in sources().items()
        for node in tree.body
        if isinstance(node, ast.FunctionDef) and node.name.lstrip("_") == "one_line"
    }
    assert homes == {"se_forwarder.logs"}
