"""Run the fleet view's KQL locally (workbooks, alerts, library queries) over the agent's rows.

``Engine`` executes a query the way Log Analytics would (duckdb-kql over DuckDB); ``params``
substitutes workbook parameters the way the portal does. Needs the ``report`` extra.
"""

from .kql.engine import Engine, Row, as_utc
from .kql.params import TimeRange, UnknownParameter, declared, placeholders, substitute
from .kql.shims import INGESTION_COLUMN

__all__ = [
    "INGESTION_COLUMN",
    "Engine",
    "Row",
    "TimeRange",
    "UnknownParameter",
    "as_utc",
    "declared",
    "placeholders",
    "substitute",
]
