"""duckdb-kql's translations kept on disk (report/kql/kqlcache.py): the same rows as a translation
made now, at any moment; read back by another process; never a stale answer for another schema or a
broken file."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta

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
