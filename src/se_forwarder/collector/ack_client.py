"""Azure's acknowledge API, through the management SDK's public pipeline: azure-mgmt-core's
``ARMPipelineClient`` with the ARM policies (bearer token for Resource Manager from the
collector's credential, resource provider registration, ARM's logging) and an
``azure.core.rest.HttpRequest``. No Python SDK has the operation yet (azure-mgmt-maintenance
2.1.0 predates it): the request is the documented one, the HTTP is the SDK's.

``POST {resource}/providers/Microsoft.Maintenance/scheduledevents/{EventId}/acknowledge``, where
``{resource}`` is the ARM id of the VM or the scale set the event names; 200 answers
``{"value": "Successfully Approved"}``. Retries are the caller's (the project's one backoff with
the answer's Retry-After): the SDK's own retry policy is off."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from azure.core.exceptions import AzureError
from azure.core.pipeline import policies
from azure.core.rest import HttpRequest
from azure.mgmt.core import ARMPipelineClient
from azure.mgmt.core.policies import (
    ARMAutoResourceProviderRegistrationPolicy,
    ARMChallengeAuthenticationPolicy,
    ARMHttpLoggingPolicy,
)

from .. import __version__
from ..backoff import parse_retry_after
from ..clock import Clock

ARM_SCOPE = "https://management.azure.com/.default"


@dataclass(frozen=True, slots=True)
class AckAnswer:
    status: int  # HTTP status; 0: no answer (connection failed, timed out)
    code: str  # ARM's error code ("AuthorizationFailed", ...), "" on success or none given
    message: str  # one line, for the log and the record
    retry_after: float | None = None  # seconds, from the answer's headers


def ack_path(resource_id: str, event_id: str) -> str:
    return (
        f"{resource_id.rstrip('/')}/providers/Microsoft.Maintenance/scheduledevents/"
        f"{quote(event_id, safe='')}/acknowledge"
    )


def _error_of(body: Any) -> tuple[str, str]:
    err = body.get("error") if isinstance(body, dict) else None
    if not isinstance(err, dict):
        return "", ""
    return str(err.get("code") or ""), " ".join(str(err.get("message") or "").split())[:300]


class AckClient:
    def __init__(
        self,
        endpoint: str,
        credential: Any,
        api_version: str,
        clock: Clock,
        *,
        ca_file: str | None = None,
    ) -> None:
        self.api_version, self.clock = api_version, clock
        chain = [
            policies.RequestIdPolicy(),
            policies.HeadersPolicy(),
            policies.UserAgentPolicy(sdk_moniker=f"se-forwarder-collector/{__version__}"),
            policies.ProxyPolicy(),
            policies.ContentDecodePolicy(),
            ARMAutoResourceProviderRegistrationPolicy(),
            policies.RetryPolicy(retry_total=0),  # ours: the one backoff, Retry-After honoured
            ARMChallengeAuthenticationPolicy(credential, ARM_SCOPE),
            policies.NetworkTraceLoggingPolicy(),
            ARMHttpLoggingPolicy(),
        ]
        kw: dict[str, Any] = {"connection_verify": ca_file} if ca_file else {}
        self.client: ARMPipelineClient[Any, Any] = ARMPipelineClient(
            base_url=endpoint, policies=chain, **kw
        )

    def acknowledge(self, resource_id: str, event_id: str) -> AckAnswer:
        """One POST; never raises for what Azure (or the network) answers."""
        request = HttpRequest(
            "POST",
            self.client.format_url(ack_path(resource_id, event_id)),
            params={"api-version": self.api_version},
            headers={"Accept": "application/json"},
        )
        try:
            response = self.client.send_request(request)
            response.read()
        except AzureError as exc:  # no answer: DNS, connection, TLS, timeout, token
            return AckAnswer(0, type(exc).__name__, " ".join(str(exc).split())[:300])
        try:
            body = response.json() if response.content else None
        except ValueError:
            body = None
        code, message = _error_of(body)
        if response.status_code == 200 and not message and isinstance(body, dict):
            message = str(body.get("value") or "")[:300]
        return AckAnswer(
            response.status_code,
            code,
            message,
            parse_retry_after(response.headers, self.clock),
        )

    def close(self) -> None:
        self.client.close()
