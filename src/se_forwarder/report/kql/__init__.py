"""The project's KQL run locally as Log Analytics would: duckdb-kql over DuckDB, the rows loaded."""
