"""A let several queries of one report define alike is computed once
(se_forwarder.report.kql.shared,
``Engine.share``): every query's rows stay what they were without sharing, the let is stored once
per definition, time range and moment, and what must not be stored (another definition, another
time range, a let whose rows carry an order) is not. Engine-level: real DuckDB, no workbook."""

from __future__ import annotations

from datetime import timedelta

from se_forwarder.report import Engine
from se_forwarder.report.kql.shared import Plan, normalize, split

NOW = "2026-03-01T12:00:00Z"
BEATS = [
    {
        "TimeGenerated": f"2026-03-01T{h:02d}:{m:02d}:00.000Z",
        "RecordId": f"h-{v}-{h}-{m}",
        "Reason": "stop" if (v, h) == (2, 11) else "periodic",
        "VmId": f"vm-{v}",
        "VmName": f"name-{v}",
        "Polls": h * 60 + m,
    }
    for v in range(4)
    for h in range(8, 12)
    for m in (0, 30)
    if (v, h) != (3, 11)
]

#: a definition (the newest heartbeat of each VM) and the queries that read it
LAST = """let beats = ScheduledEventsAgent_CL | where isnotempty(VmId);
let newest = beats
    | summarize arg_max(TimeGenerated, *) by VmId;   // one row per VM
"""
QUERIES = {
    "stopped": LAST + "newest | where Reason == 'stop' | project VmId, Polls",
    "count": LAST + "newest | summarize Vms = count(), Newest = max(TimeGenerated)",
    # the same definition, comments and blanks aside, another let between its lets
    "late": (
        "let early = datetime(2026-03-01 11:00);\n"
        "let beats = ScheduledEventsAgent_CL   // the same lets\n    | where isnotempty(VmId);\n"
        "let newest = beats | summarize arg_max(TimeGenerated, *) by VmId;\n"
        "newest | where TimeGenerated < early | project VmId, TimeGenerated"
    ),
    # another definition under the same name: never mixed up with the first
    "other": (
        "let newest = ScheduledEventsAgent_CL | summarize arg_min(TimeGenerated, *) by VmId;\n"
        "newest | project VmId, Polls"
    ),
}
HOUR = timedelta(hours=1)


def _stored(engine: Engine) -> list[str]:
    return [
        r[0]
        for r in engine.con.execute(
            "SELECT table_name FROM information_schema.tables "
            "WHERE table_name LIKE 'shared_let_%' ORDER BY table_name"
        ).fetchall()
    ]


def _runs(engine: Engine, timespans: dict[str, timedelta | None]) -> dict[str, list]:
    return {
        k: sorted(map(repr, engine.run(QUERIES[k], timespan=timespans.get(k)))) for k in QUERIES
    }


def test_a_shared_definition_is_computed_once_and_every_result_stays_the_same() -> None:
    with Engine([], BEATS, now=NOW) as plain, Engine([], BEATS, now=NOW) as sharing:
        before = _runs(plain, {})
        sharing.share((q, None, None, None) for q in QUERIES.values())
        after = _runs(sharing, {})
        assert after == before
        assert before["stopped"] == [repr({"VmId": "vm-2", "Polls": 690})]
        assert _stored(sharing) == ["shared_let_1"]  # `newest` of stopped, count and late
        assert _stored(plain) == []


def test_another_time_range_is_another_definition() -> None:
    spans = {"stopped": 3 * HOUR, "count": HOUR, "late": HOUR}
    with Engine([], BEATS, now=NOW) as plain, Engine([], BEATS, now=NOW) as sharing:
        before = _runs(plain, spans)
        sharing.share((q, None, None, spans.get(k)) for k, q in QUERIES.items())
        assert _runs(sharing, spans) == before
        assert _stored(sharing) == ["shared_let_1"]  # count and late's, not stopped's
        assert before["count"] != _runs(plain, {})["count"]  # the range matters


def test_closures_ignore_comments_blanks_and_the_order_of_independent_lets() -> None:
    plan = Plan([(QUERIES["stopped"], None), (QUERIES["late"], None), (QUERIES["other"], None)])
    assert sorted(plan.counts.values()) == [1, 2]
    a, b = "let a = T | where x > 1;", "let b = U | summarize by x;"
    join = "let c = a | join b on x; c"
    assert sorted(
        Plan([(f"{a} {b} {join}", None), (f"{b}\n{a}\n{join}", None)]).counts.values()
    ) == [2, 2]
    assert normalize("T  //c\n| where a == 'x  //y'") == "T | where a == 'x  //y'"
    statements, body = split(QUERIES["late"])
    assert [s.name for s in statements] == ["early", "beats", "newest"]
    assert body.startswith("newest | where")


def test_workbook_filters_that_hold_every_value_are_no_difference() -> None:
    zone = (
        "let r = ScheduledEvents_CL | where '*' in ('*') or Zone in ('*') "
        "| summarize arg_max(TimeGenerated, *) by VmId; r"
    )
    plain = "let r = ScheduledEvents_CL | summarize arg_max(TimeGenerated, *) by VmId; r"
    chosen = zone.replace("Zone in ('*')", "Zone in ('1')")
    assert sorted(Plan([(zone, None), (plain, None), (chosen, None)]).counts.values()) == [1, 2]


def test_lets_whose_rows_carry_an_order_are_never_stored() -> None:
    top = (
        "let firsts = ScheduledEventsAgent_CL | summarize n = count() by VmId "
        "| order by VmId asc | take 2;\nfirsts | project VmId"
    )
    with Engine([], BEATS, now=NOW) as sharing:
        sharing.share([(top, None, None, None)] * 2)
        assert sharing.run(top) == sharing.run(top)
        assert _stored(sharing) == []


def test_lets_that_keep_a_row_per_row_read_are_never_stored() -> None:
    dedupe = (
        "let beats = ScheduledEventsAgent_CL | summarize arg_max(TimeGenerated, *) by RecordId;"
        " beats | count"
    )
    expand = (
        "let times = ScheduledEventsAgent_CL | summarize T = make_list(TimeGenerated) by VmId"
        " | mv-expand T; times | count"
    )
    plan = Plan([(dedupe, None), (dedupe, None), (expand, None), (expand, None)])
    assert plan.counts == {}


def test_inside_a_shared_let_only_what_more_queries_share_is_stored_apart() -> None:
    base = "let beats = ScheduledEventsAgent_CL | summarize arg_max(TimeGenerated, *) by VmId;\n"
    wide = base + "let per = beats | summarize n = count() by Reason;\n"
    queries = [base + "beats | count", wide + "per", wide + "per | where n > 1"]
    made: list[str] = []

    def materialize(closure: str) -> str:
        made.append(closure.rsplit(";", 1)[1].strip())
        return f"stored_{len(made)}"

    plan = Plan((q, None) for q in queries)
    assert plan.rewrite(queries[0], None, materialize) == "let beats = stored_1; beats | count"
    assert plan.rewrite(queries[2], None, materialize) == "let per = stored_3; per | where n > 1"
    assert made == ["beats", "beats", "per"]  # per's own beats is the one all three share


def test_a_query_that_cannot_be_prepared_shares_nothing_and_fails_alone() -> None:
    broken = [
        "ScheduledEventsAgent_CL | where VmId == {Missing}",
        "ScheduledEventsAgent_CL | where VmId == 'unterminated",
    ]
    with Engine([], BEATS, now=NOW) as sharing:
        sharing.share(
            [
                *((q, None, {}, None) for q in broken),
                *((q, None, None, None) for q in QUERIES.values()),
            ]
        )
        assert sharing.run(QUERIES["stopped"]) == [{"VmId": "vm-2", "Polls": 690}]
        assert _stored(sharing) == ["shared_let_1"]


def test_text_inside_a_literal_is_neither_a_filter_nor_a_row_per_row_let() -> None:
    # the words of an all-values filter and of a dedupe, as text: kept, and the let still stored
    said = "| where '*' in ('*') or Zone in ('*') | and more"
    quoted = (
        f"let r = ScheduledEventsAgent_CL | where Reason != \"{said}\" and Reason != 'by RecordId'"
        " | summarize n = count() by VmId; r"
    )
    assert said in normalize(quoted)
    assert (
        normalize("let r = T | where '*' in ('*') or Zone in ('*') | count; r")
        == "let r = T | count; r"
    )  # the filter itself still goes
    assert sorted(Plan([(quoted, None), (quoted, None)]).counts.values()) == [2]
