"""The acknowledge stand-in's own rules, through the collector's client (azure-mgmt-core's
``ARMPipelineClient``): ARM's order (token, api-version, role, then the event), the event's
state shared with the Resource Graph stand-in, its answers in ARM's error shape."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from azure.core.credentials import AccessToken

from se_forwarder.clock import SYSTEM
from se_forwarder.collector.ack_client import AckClient
from se_forwarder_testbed.standins.maintenance import MaintenanceStandIn
from se_forwarder_testbed.standins.resource_graph import ARM_AUDIENCE, ResourceGraphStandIn
from se_forwarder_testbed.standins.tls import generate
from se_forwarder_testbed.standins.tokens import TokenAuthority

pytestmark = pytest.mark.tls

SUB = "00000000-0000-0000-0000-0000000000aa"
VM = f"/subscriptions/{SUB}/resourceGroups/rg-app/providers/Microsoft.Compute/virtualMachines/vm-1"


class Token:
    """A credential holding one token (for the audience and subject the test chooses)."""

    def __init__(self, authority: TokenAuthority, audience: str, subject: str) -> None:
        self.token, self.expires = authority.issue(audience, subject=subject)

    def get_token(self, *scopes: str, **kw: Any) -> AccessToken:
        return AccessToken(self.token, self.expires)


@pytest.fixture
def bed(tmp_path) -> Iterator[tuple[TokenAuthority, ResourceGraphStandIn, MaintenanceStandIn]]:
    authority = TokenAuthority()
    with (
        ResourceGraphStandIn(generate(tmp_path / "arg"), authority) as arg,
        MaintenanceStandIn(generate(tmp_path / "ack"), authority, arg) as ack,
    ):
        arg.tables["maintenanceresources"] = [
            {
                "id": f"{VM}/providers/Microsoft.Maintenance/scheduledevents/E-1",
                "name": "E-1",
                "type": "microsoft.maintenance/scheduledevents",
                "properties": {"EventId": "E-1", "EventStatus": "Scheduled", "NotBefore": "x"},
            }
        ]
        yield authority, arg, ack


def client(ack, credential, version: str = "2023-10-01-preview") -> AckClient:
    return AckClient(ack.endpoint, credential, version, SYSTEM, ca_file=str(ack.tls.ca_cert))


def test_arm_order_token_api_version_role_then_the_event(bed):
    authority, arg, ack = bed
    ack.grant("collector", f"/subscriptions/{SUB}/resourceGroups/RG-APP")  # any case
    wrong_audience = client(ack, Token(authority, "https://storage.azure.com", "collector"))
    assert wrong_audience.acknowledge(VM, "E-1").status == 401
    good = Token(authority, ARM_AUDIENCE, "collector")
    old = client(ack, good, "2022-07-01-preview").acknowledge(VM, "E-1")
    assert (old.status, old.code) == (400, "NoRegisteredProviderFound")
    other = client(ack, Token(authority, ARM_AUDIENCE, "someone-else")).acknowledge(VM, "E-1")
    assert (other.status, other.code) == (403, "AuthorizationFailed")
    assert "someone-else" in other.message
    assert client(ack, good).acknowledge(VM, "E-404").status == 404
    done = client(ack, good).acknowledge(VM, "E-1")
    assert (done.status, done.code, done.message) == (200, "", "Successfully Approved")
    # the platform starts an approved event: Resource Graph says so, and it cannot be again
    assert arg.tables["maintenanceresources"][0]["properties"]["EventStatus"] == "Started"
    again = client(ack, good).acknowledge(VM, "E-1")
    assert (again.status, again.code) == (409, "Conflict")
    assert ack.acknowledged == ["E-1"]
    assert [r["status"] for r in ack.requests] == [401, 400, 403, 404, 200, 409]


def test_a_missing_api_version_is_refused_as_arm_does(bed):
    from azure.core.rest import HttpRequest

    authority, _, ack = bed
    ack.grant("collector", f"/subscriptions/{SUB}")
    c = client(ack, Token(authority, ARM_AUDIENCE, "collector"))
    url = c.client.format_url(
        f"{VM}/providers/Microsoft.Maintenance/scheduledevents/E-1/acknowledge"
    )
    answer = c.client.send_request(HttpRequest("POST", url))
    assert answer.status_code == 400
    assert answer.json()["error"]["code"] == "MissingApiVersionParameter"
    assert ack.acknowledged == []


def test_faults_answer_an_events_next_requests_with_retry_after(bed):
    authority, _, ack = bed
    ack.grant("collector", f"/subscriptions/{SUB}")
    ack.faults = {"E-1": [(429, 7.0), (503, 0.5)]}
    c = client(ack, Token(authority, ARM_AUDIENCE, "collector"))
    first, second = c.acknowledge(VM, "E-1"), c.acknowledge(VM, "E-1")
    assert (first.status, first.retry_after) == (429, 7.0)
    assert (second.status, second.retry_after) == (503, 0.5)
    assert c.acknowledge(VM, "E-1").status == 200
