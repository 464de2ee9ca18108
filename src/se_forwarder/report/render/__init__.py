"""The report as a person reads it: values, charts, panels and the self-contained HTML page."""
