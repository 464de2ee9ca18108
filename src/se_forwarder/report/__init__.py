"""Run the fleet view's KQL locally (workbooks, alerts, library queries) over the agent's rows.

``Engine`` executes a query the way Log Analytics would (duckdb-kql over DuckDB); ``params``
substitutes workbook parameters the way the portal does. Needs the ``report`` extra.
"""

from .engine import Engine, Row, as_utc
from .params import TimeRange, UnknownParameter, declared, placeholders, substitute
from .shims import INGESTION_COLUMN

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
