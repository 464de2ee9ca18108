"""Which VMs run an agent, for the collector's approvals: an agent owns its VM's approval (its
hooks run first), so the collector never approves an event that names such a VM.

The evidence is the fleet view's: the agents' own heartbeats (``ScheduledEventsAgent_CL``) in
Log Analytics, read with azure-monitor-query's ``LogsQueryClient``. A VM with any heartbeat within
the look-back (48 hours by default: an agent stopped for a reboot, an upgrade or a silence of a
day still counts) has an agent. When the workspace cannot be read, nothing is known, and the
collector approves nothing (fail safe)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from azure.core.exceptions import AzureError
from azure.monitor.query import LogsQueryClient, LogsQueryStatus

from .. import contract
from .arm import vm_key

LOGS_AUDIENCE = "https://api.loganalytics.io"


def query(hours: float) -> str:
    beats = contract.table(contract.HEARTBEATS).table
    return (
        f"{beats} | where TimeGenerated > ago({hours:g}h) "
        "| summarize by SubscriptionId = tolower(SubscriptionId), "
        "ResourceGroup = tolower(ResourceGroup), VmName = tolower(VmName)"
    )


class AgentsView:
    def __init__(
        self,
        workspace_id: str,
        credential: Any,
        lookback_hours: float,
        *,
        endpoint: str = LOGS_AUDIENCE,
        ca_file: str | None = None,
    ) -> None:
        self.workspace_id, self.hours = workspace_id, lookback_hours
        kw: dict[str, Any] = {"connection_verify": ca_file} if ca_file else {}
        self.client = LogsQueryClient(
            credential, endpoint=endpoint, audience=LOGS_AUDIENCE, retry_total=0, **kw
        )

    def watched(self) -> tuple[frozenset[str] | None, str | None]:
        """(the keys of the VMs with an agent, None) or (None, why nothing is known)."""
        try:
            result = self.client.query_workspace(
                self.workspace_id, query(self.hours), timespan=timedelta(hours=self.hours)
            )
        except AzureError as exc:
            return None, " ".join(str(exc).split())[:300]
        if result.status != LogsQueryStatus.SUCCESS:  # a partial answer may miss an agent
            return None, "the agents' heartbeats were read only in part"
        keys = {
            vm_key(str(row[0]), str(row[1]), str(row[2]))
            for table in result.tables
            for row in table.rows
        }
        return frozenset(keys), None

    def close(self) -> None:
        self.client.close()
