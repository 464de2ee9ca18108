"""duckdb-kql's translations kept on disk (report/kql/kqlcache.py): the same rows as a translation
made now, at any moment; read back by another process; never a stale answer for another schema or a
broken file."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from se_forwarder.report import Engine
from se_forwarder.report.kql import engine, kqlcache

BEATS = [
    {
        "TimeGenerated": f"2026-03-01T{h:02d}:00:00.000Z",
        "RecordId": f"h-{v}-{h}",
        "VmId": f"vm-{v}",
        "Reason": "periodic",
        "Polls": h,
    }
    for v in range(3)
    for h in range(8, 12)
]
#: the clock and a literal time and span: values the translation binds
QUERY = (
    "ScheduledEventsAgent_CL | where TimeGenerated > ago(2h) and TimeGenerated > "
    "datetime(2026-03-01 08:30)"
    " | summarize Beats = count(), Span = max(TimeGenerated) - min(TimeGenerated) + 1m by VmId"
    " | order by VmId asc"
)


def _rows(moment: str) -> list[dict]:
    engine._TRANSLATED.clear()  # as a new process: nothing translated in memory
    with Engine([], BEATS, now=moment) as e:
        return e.run(QUERY)


def test_a_stored_translation_gives_the_rows_of_a_fresh_one_at_every_moment(
    tmp_path, monkeypatch
) -> None:
    monkeypatch.delenv(kqlcache.ENV)  # the suite's own (tests/conftest.py): translated now
    fresh = {m: _rows(m) for m in ("2026-03-01T11:00:00Z", "2026-03-01T12:30:00Z")}
    assert fresh["2026-03-01T11:00:00Z"] != fresh["2026-03-01T12:30:00Z"]  # the clock matters
    monkeypatch.setenv(kqlcache.ENV, str(tmp_path))
    stored = {m: _rows(m) for m in fresh}  # the first stores, the second reads at another moment
    assert len(list(tmp_path.glob("*.json"))) == 1
    assert stored == fresh
    assert {m: _rows(m) for m in fresh} == fresh  # both read from the file


def test_the_file_is_what_is_run_and_another_schema_is_another_key(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv(kqlcache.ENV, str(tmp_path))
    _rows("2026-03-01T12:00:00Z")
    (path,) = tmp_path.glob("*.json")
    data = json.loads(path.read_text())
    data.update(sql="SELECT 'from the file' AS Where_", values={}, clock=[])
    path.write_text(json.dumps(data))
    assert _rows("2026-03-01T12:00:00Z") == [{"Where_": "from the file"}]
    assert kqlcache.key(QUERY, (("t", ("a",)),)) != kqlcache.key(QUERY, (("t", ("a", "b")),))


@pytest.mark.parametrize("damage", ["{not json", json.dumps({"sql": "SELECT 1"}), ""])
def test_a_broken_file_is_a_miss_and_is_replaced(tmp_path, monkeypatch, damage: str) -> None:
    monkeypatch.delenv(kqlcache.ENV)
    want = _rows("2026-03-01T12:00:00Z")
    monkeypatch.setenv(kqlcache.ENV, str(tmp_path))
    _rows("2026-03-01T12:00:00Z")
    (path,) = tmp_path.glob("*.json")
    path.write_text(damage)
    assert _rows("2026-03-01T12:00:00Z") == want
    assert json.loads(path.read_text())["sql"].lstrip().upper().startswith(("SELECT", "WITH"))


def test_values_round_trip_and_what_json_cannot_carry_stays_in_memory(tmp_path) -> None:
    values = {
        "a": datetime(2026, 3, 1, 12, tzinfo=UTC),
        "b": timedelta(days=1, microseconds=7),
        "c": [1, "x", None],
        "d": 2.5,
        "e": True,
    }
    assert kqlcache.put(tmp_path, "k", ("SELECT 1", values, ("a",)))
    assert kqlcache.get(tmp_path, "k") == ("SELECT 1", values, ("a",))
    assert not kqlcache.put(tmp_path, "other", ("SELECT 1", {"f": object()}, ()))
    assert kqlcache.get(tmp_path, "other") is None


@pytest.mark.process
def test_another_process_reads_what_one_stored(tmp_path) -> None:
    code = (
        "import json; from se_forwarder.report import Engine; import sys\n"
        f"beats = json.loads({json.dumps(json.dumps(BEATS))})\n"
        "with Engine([], beats, now='2026-03-01T12:00:00Z') as e:\n"
        f"    print(json.dumps(e.run({QUERY!r}), default=str))\n"
    )
    env = {**os.environ, kqlcache.ENV: str(tmp_path)}
    first = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    (path,) = tmp_path.glob("*.json")
    stamp = path.stat().st_mtime_ns
    second = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    assert second.stdout == first.stdout and json.loads(first.stdout)
    assert path.stat().st_mtime_ns == stamp  # read, not written again


def test_tables_a_query_does_not_name_do_not_make_another_translation(
    tmp_path, monkeypatch
) -> None:
    """An engine with one more table (Resource Graph's, a shared let's) reads the translation
    another engine stored, for a query that does not name that table; one that does is
    translated against it (its columns are in what the translator was given)."""
    monkeypatch.setenv(kqlcache.ENV, str(tmp_path))
    want = _rows("2026-03-01T12:00:00Z")
    engine._TRANSLATED.clear()
    extra = [{"VmId": "vm-1", "Owner": "team-a"}]
    with Engine([], BEATS, now="2026-03-01T12:00:00Z") as e:
        e.load_table("owners", [("VmId", "string"), ("Owner", "string")], extra)
        assert e.run(QUERY) == want
        assert len(list(tmp_path.glob("*.json"))) == 1  # read, not translated again
        joined = e.run(QUERY + " | join kind=inner (owners) on VmId | project VmId, Beats, Owner")
    beats = next(r["Beats"] for r in want if r["VmId"] == "vm-1")
    assert joined == [{"VmId": "vm-1", "Beats": beats, "Owner": "team-a"}]
    assert len(list(tmp_path.glob("*.json"))) == 2
    assert engine._named(
        "owners | union ScheduledEvents*", (("owners", ("a",)), ("x", ("b",)))
    ) == (
        ("owners", ("a",)),
        ("x", ("b",)),
    )


@pytest.mark.process
def test_a_process_waits_for_the_translation_another_is_making(tmp_path) -> None:
    """While one process holds a query's claim, another that needs it waits (its lock request
    is seen blocked in /proc/locks), then runs what the first stored instead of translating."""
    import time

    code = (
        "import json; from se_forwarder.report import Engine\n"
        f"beats = json.loads({json.dumps(json.dumps(BEATS))})\n"
        "with Engine([], beats, now='2026-03-01T12:00:00Z') as e:\n"
        f"    print(json.dumps(e.run({QUERY!r}), default=str))\n"
    )
    with Engine([], BEATS, now="2026-03-01T12:00:00Z") as e:  # the key this schema gives
        e.sql(QUERY)  # the tables as a query sees them (views of the moment), translated
        text = e._text(QUERY, None, None, e.now)  # the query as the engine runs it
        name = kqlcache.key(text, engine._named(text, e._schema_key))
    env = {**os.environ, kqlcache.ENV: str(tmp_path)}
    with kqlcache.claim(tmp_path, name):
        proc = subprocess.Popen(
            [sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, text=True
        )
        deadline = time.monotonic() + 120
        while "->" not in Path("/proc/locks").read_text():  # a blocked request
            assert proc.poll() is None and time.monotonic() < deadline, "never waited"
            time.sleep(0.05)
        kqlcache.put(tmp_path, name, ("SELECT 'made by the holder' AS Made", {}, ()))
    out, _ = proc.communicate(timeout=120)
    assert json.loads(out) == [{"Made": "made by the holder"}]
