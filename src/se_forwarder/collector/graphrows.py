"""Resource Graph rows → platform rows. Pure.

A ``maintenanceresources`` row of type ``microsoft.maintenance/scheduledevents`` carries the
event's ARM id and its fields in ``properties`` (as Event Grid's ``resourceInfo`` does); a
``healthresources`` row of type ``microsoft.resourcehealth/resourceannotations`` an annotation.
Resource Graph keeps only an event's current status: a pass sees the latest one, and the
collector's time of reading is the row's ``TimeGenerated`` (Azure gives none for the status).
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from .. import timefmt
from .eventgrid import Parsed, annotation_rows, scheduled_rows
from .record import RESOURCE_GRAPH

SCHEDULED_TYPE = "microsoft.maintenance/scheduledevents"
ANNOTATION_TYPE = "microsoft.resourcehealth/resourceannotations"


def rows_of(table: str, rows: list[dict[str, Any]], collected_ms: int) -> Parsed:
    out = Parsed()
    for row in rows:
        kind = str(row.get("type") or "").lower() if isinstance(row, dict) else ""
        try:
            if kind == SCHEDULED_TYPE:
                recs = scheduled_rows(
                    str(row.get("id") or ""),
                    row.get("properties"),
                    collected_ms,
                    collected_ms,
                    RESOURCE_GRAPH,
                    None,
                    out,
                )
            elif kind == ANNOTATION_TYPE:
                recs = annotation_rows(
                    row, _occurred(row, collected_ms), collected_ms, RESOURCE_GRAPH, None
                )
            else:
                out.ignored += 1
                continue
        except (ValidationError, ValueError) as exc:
            out.problems.append(
                f"{table} row {str(row.get('id'))[:200]}: {' '.join(str(exc).split())[:200]}"
            )
            continue
        out.notifications.append((None, recs))
    return out


def _occurred(row: dict[str, Any], default_ms: int) -> int:
    found = row.get("properties")
    props = found if isinstance(found, dict) else {}
    when = props.get("occurredTime") or props.get("occurredtime")
    return timefmt.parse_iso_ms(str(when)) if when else default_ms
