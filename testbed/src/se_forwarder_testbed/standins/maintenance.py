"""Azure Resource Manager's acknowledge of a Scheduled Event (the Maintenance resource provider,
preview), for the collector's approvals: ``POST {resource}/providers/Microsoft.Maintenance/
scheduledevents/{EventId}/acknowledge?api-version=…`` over HTTPS, answered as ARM would.

Its rules, in ARM's order: a bearer token for ``https://management.azure.com`` issued by the
:class:`~se_forwarder_testbed.standins.tokens.TokenAuthority` (else 401
``InvalidAuthenticationToken``); ``api-version`` present (400 ``MissingApiVersionParameter``) and
one the operation has (400 ``NoRegisteredProviderFound``); the caller (the token's ``sub``)
holding **Scheduled Event Contributor** at a scope above the resource (else 403
``AuthorizationFailed``); then the event itself, whose state it shares with the Resource Graph
stand-in (the same ``maintenanceresources`` rows, so Resource Graph and Event Grid copies and
the acknowledgements tell one story): unknown under that resource, 404; ``Scheduled``, 200
``{"value": "Successfully Approved"}`` and the event is ``Started`` (the platform starts an
approved event); no longer ``Scheduled``, 409. The error codes of the last two are not
documented (shared/spec/platform-channels.md): 404 ``NotFound`` and 409 ``Conflict`` are ARM's
generic ones. ``faults`` answers an event's next requests with 429 or 5xx and a Retry-After first.
"""

from __future__ import annotations

import re
import threading
from http.server import ThreadingHTTPServer
from typing import Any, Self
from urllib.parse import parse_qs, unquote, urlsplit

from se_forwarder.clock import SYSTEM, Clock

from .json_https import serve_json
from .resource_graph import ARM_AUDIENCE, ResourceGraphStandIn
from .served import Served
from .tls import TlsFiles
from .tokens import InvalidToken, TokenAuthority

ROLE = "Scheduled Event Contributor"
API_VERSIONS = ("2023-10-01-preview", "2025-10-01-preview")
_PATH = re.compile(
    r"^(?P<resource>/subscriptions/[^/]+/resourcegroups/[^/]+/providers/microsoft\.compute/"
    r"(?:virtualmachines|virtualmachinescalesets|availabilitysets)/[^/]+)"
    r"/providers/microsoft\.maintenance/scheduledevents/(?P<event>[^/]+)/acknowledge$",
    re.IGNORECASE,
)


def _error(status: int, code: str, message: str) -> tuple[int, dict[str, str], Any]:
    return status, {}, {"error": {"code": code, "message": message}}


class MaintenanceStandIn(Served):
    def __init__(
        self,
        tls: TlsFiles,
        authority: TokenAuthority,
        graph: ResourceGraphStandIn,
        *,
        clock: Clock = SYSTEM,
    ) -> None:
        """``clock``: the time each request is logged at (a test's FakeClock)."""
        self.tls, self.authority, self.graph, self.clock = tls, authority, graph, clock
        #: principal (the token's ``sub``) -> scopes where it holds Scheduled Event Contributor
        self.contributors: dict[str, list[str]] = {}
        #: EventId -> its next answers: (429 or 5xx, Retry-After seconds), in order
        self.faults: dict[str, list[tuple[int, float]]] = {}
        self.requests: list[dict[str, Any]] = []  # every request: path, principal, status
        self.acknowledged: list[str] = []  # EventIds approved, in order
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None

    @property
    def endpoint(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def grant(self, principal: str, scope: str) -> None:
        self.contributors.setdefault(principal, []).append(scope.lower().rstrip("/"))

    def start(self) -> Self:
        self._server = serve_json(self.tls, self.answer)
        return self

    def answer(self, target: str, headers: Any, body: bytes) -> tuple[int, dict[str, str], Any]:
        with self._lock:
            principal: list[str] = []
            status, extra, out = self._answer(target, headers, principal)
            self.requests.append(
                {
                    "path": unquote(urlsplit(target).path),
                    "principal": principal[0] if principal else None,
                    "status": status,
                    "at_ms": self.clock.wall_ms(),
                }
            )
            return status, extra, out

    def _answer(
        self, target: str, headers: Any, principal: list[str]
    ) -> tuple[int, dict[str, str], Any]:
        parts = urlsplit(target)
        m = _PATH.match(unquote(parts.path))
        if m is None:
            return _error(404, "InvalidResourceType", f"no such operation: {parts.path}")
        try:
            claims = self.authority.verify(
                (headers.get("Authorization") or "").removeprefix("Bearer "), ARM_AUDIENCE
            )
        except InvalidToken as exc:
            return _error(401, "InvalidAuthenticationToken", str(exc))
        who = str(claims.get("sub"))
        principal.append(who)
        versions = parse_qs(parts.query).get("api-version")
        if not versions:
            return _error(
                400,
                "MissingApiVersionParameter",
                "The api-version query parameter (?api-version=) is required for all requests.",
            )
        if versions[0] not in API_VERSIONS:
            return _error(
                400,
                "NoRegisteredProviderFound",
                f"No registered resource provider found for API version '{versions[0]}' and "
                f"type 'scheduledevents'. The supported api-versions are "
                f"'{', '.join(API_VERSIONS)}'.",
            )
        resource = m["resource"].lower()
        if not any(
            resource == s or resource.startswith(s + "/") for s in self.contributors.get(who, [])
        ):
            return _error(
                403,
                "AuthorizationFailed",
                f"The client '{who}' with object id '{who}' does not "
                "have authorization to perform action "
                "'Microsoft.Maintenance/scheduledevents/acknowledge/action' over scope "
                f"'{m['resource']}' or the scope is invalid.",
            )
        if self.faults.get(m["event"]):
            code, retry_after = self.faults[m["event"]].pop(0)
            busy = "TooManyRequests" if code == 429 else "InternalServerError"
            return (
                code,
                {"Retry-After": f"{retry_after:g}"},
                {"error": {"code": busy, "message": "try again later"}},
            )
        return self._acknowledge(resource, m["event"])

    def _acknowledge(self, resource: str, event_id: str) -> tuple[int, dict[str, str], Any]:
        row = self._event(resource, event_id)
        if row is None:
            return _error(404, "NotFound", f"Scheduled event '{event_id}' was not found.")
        props = row["properties"]
        if props.get("EventStatus") != "Scheduled":
            return _error(
                409,
                "Conflict",
                f"Scheduled event '{event_id}' is {props.get('EventStatus')}: "
                "it can no longer be acknowledged.",
            )
        props["EventStatus"], props["NotBefore"] = "Started", ""
        self.acknowledged.append(event_id)
        return 200, {}, {"value": "Successfully Approved"}

    def _event(self, resource: str, event_id: str) -> dict[str, Any] | None:
        prefix = f"{resource}/providers/microsoft.maintenance/scheduledevents/"
        for row in self.graph.tables.get("maintenanceresources", []):
            rid = str(row.get("id", "")).lower()
            if rid == prefix + event_id.lower():
                return row
        return None
