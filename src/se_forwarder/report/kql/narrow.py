"""duckdb-kql's SQL narrowed where the engine knows a value is text: same rows, less planning.

duckdb-kql translates without column types, so every ``tostring()`` it writes (and the ones hidden
in ``strcat``, ``tolower``, ``isnotempty``...) is a ``CASE typeof(x)`` over eight types, with a
lambda for timespans: about 1 kB of SQL each, two thirds of a fleet-vms query's 330 kB, and
DuckDB binds all of it again at every evaluation (DuckDB 2 re-plans prepared statements too).
For a string literal the answer is the literal; for a column the engine holds as VARCHAR it is the
column. A column's name does not say its type inside the query (``extend Zone = 1`` shadows it),
so a narrowed column carries a guard: if the value is not text, DuckDB raises ``GUARD`` and the
engine runs the translation as written (``Engine._execute``). Where the guess holds the rows are
the same; where it does not, the answer is duckdb-kql's own.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import cache

#: the message of the guard's error; the engine runs the query as translated when it sees it
GUARD = "se-report: narrowed value is not text"

_SENTINEL_NAME = "se_narrow_sentinel"
_SENTINEL = f'"{_SENTINEL_NAME}"'
_WRAPPED = re.compile(r"""CASE typeof\(('(?:[^']|'')*'|"(?:[^"]|"")*")\) WHEN 'JSON'""")


@cache
def _template() -> str | None:
    """duckdb-kql's generic ``tostring`` of the sentinel column, as its installed version writes
    it; None if its shape is not the one this module knows (then nothing is narrowed)."""
    import duckdb_kql

    sql = str(duckdb_kql.to_sql(f"T | extend x = tostring({_SENTINEL_NAME})"))
    m = re.search(rf"coalesce\((CASE typeof\({_SENTINEL}\) WHEN 'JSON'.*END), ''\) AS \"x\"", sql)
    return (
        m.group(1) if m and m.group(1).endswith(f"ELSE CAST({_SENTINEL} AS VARCHAR) END") else None
    )


def narrowed(sql: str, text_columns: Iterable[str]) -> str:
    """``sql`` with the generic ``tostring`` of each string literal replaced by the literal and
    that of each column in ``text_columns`` by the guarded column."""
    template = _template()
    if template is None:
        return sql
    text = {f'"{c}"' for c in text_columns}
    for value in set(_WRAPPED.findall(sql)):
        if value.startswith("'"):
            plain = value
        elif value in text:
            plain = (
                f"CAST(CASE WHEN typeof({value}) = 'VARCHAR' THEN {value} "
                f"ELSE error('{GUARD}') END AS VARCHAR)"
            )
        else:
            continue
        sql = sql.replace(template.replace(_SENTINEL, value), plain)
    return sql
