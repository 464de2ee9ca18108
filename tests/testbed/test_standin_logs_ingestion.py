"""The Logs Ingestion stand-in, exercised through the real azure-monitor-ingestion SDK (and raw
HTTPS with httpx where the point is a protocol rule the SDK would never break)."""

from __future__ import annotations

import gzip
import json
import os
import signal
import ssl
import subprocess
import sys
import threading
import time

import httpx
import pytest
from azure.core.credentials import AccessToken
from azure.core.exceptions import (
    ClientAuthenticationError,
    HttpResponseError,
    ResourceNotFoundError,
    ServiceRequestError,
    ServiceResponseError,
)
from azure.monitor.ingestion import LogsIngestionClient

from se_forwarder import contract
from se_forwarder_testbed.standins.logs_ingestion import MAX_BODY_BYTES, LogsIngestionStandIn
from se_forwarder_testbed.standins.tokens import MONITOR_AUDIENCE, TokenAuthority

pytestmark = [pytest.mark.e2e, pytest.mark.tls]

RECORDS = contract.table("records").stream
HEARTBEATS = contract.table("heartbeats").stream


class StandInCredential:
    """Entra ID stand-in: a TokenCredential whose tokens come from a TokenAuthority."""

    def __init__(
        self,
        authority: TokenAuthority,
        subject: str = "system-assigned",
        lifetime: int = 3600,
        audience: str | None = None,
    ) -> None:
        self.authority, self.subject, self.lifetime, self.audience = (
            authority,
            subject,
            lifetime,
            audience,
        )
        self.scopes: list[tuple[str, ...]] = []

    def get_token(self, *scopes: str, **kwargs: object) -> AccessToken:
        self.scopes.append(scopes)
        audience = self.audience or scopes[0].removesuffix("/.default")
        token, expires_on = self.authority.issue(
            audience, subject=self.subject, lifetime=self.lifetime, now=time.time()
        )
        return AccessToken(token, expires_on)


def record(i: int = 0, **over: object) -> dict:
    rec = {
        "TimeGenerated": "2022-04-11T22:11:58.000Z",
        "RecordId": f"rid-{i:06d}",
        "Phase": "FirstSeen",
        "Outcome": None,
        "EventId": "602d9444-d2cd-49c7-8624-8643e7171297",
        "EventType": "Reboot",
        "EventStatus": "Scheduled",
        "EventSource": "Platform",
        "ResourceType": "VirtualMachine",
        "Resources": ["vm-a"],
        "Description": "Virtual machine is going to be restarted",
        "DurationInSeconds": -1,
        "NotBefore": "2022-04-11T22:26:58.000Z",
        "DocumentIncarnation": 2,
        "FirstSeenAt": "2022-04-11T22:11:58.000Z",
        "StartedAt": None,
        "NoticeSeconds": 900.0,
        "SinceFirstSeenSeconds": 0.0,
        "StartDelaySeconds": None,
        "SinceStartedSeconds": None,
        "UncertaintySeconds": 1.0,
        "AffectsThisVm": True,
        "Computer": "vm-a",
        "VmName": "vm-a",
        "VmId": "9f1d2c3b-0000-4000-8000-000000000001",
        "VmResourceId": None,
        "SubscriptionId": None,
        "ResourceGroup": None,
        "Location": "westeurope",
        "Zone": "1",
        "ScaleSetName": None,
        "FaultDomain": 0,
        "UpdateDomain": 0,
        "AgentVersion": "0.1.0",
    }
    rec.update(over)
    return rec


def heartbeat(**over: object) -> dict:
    hb = {
        "TimeGenerated": "2022-04-11T22:15:00.000Z",
        "RecordId": "hb-1",
        "Reason": "periodic",
        "Computer": "vm-a",
        "VmName": "vm-a",
        "AgentVersion": "0.1.0",
        "UptimeSeconds": 300.5,
        "Polls": 300,
        "PollErrors": 0,
        "LastPollLatencyMs": 2.5,
        "LastIncarnation": 2,
        "OpenEvents": 1,
        "SpoolDepth": 0,
        "DeliveredRecords": 12,
        "FailedDeliveries": 0,
        "DroppedRecords": 0,
        "DeadLetteredRecords": 0,
        "FaultDomain": 0,
        "UpdateDomain": 0,
    }
    hb.update(over)
    return hb


@pytest.fixture(scope="module")
def tls_dir(tmp_path_factory: pytest.TempPathFactory):
    return tmp_path_factory.mktemp("tls")


@pytest.fixture(scope="module")
def server(tls_dir, authority):
    with LogsIngestionStandIn(tls_dir, authority, dcr_ids=("dcr-aaaa", "dcr-bbbb")) as s:
        yield s


@pytest.fixture
def standin(server: LogsIngestionStandIn):
    server.reset()
    server.set_allowed_subjects(None)
    yield server
    server.clear_faults()


def trust(ca_cert) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(ca_cert))


def client_for(
    s: LogsIngestionStandIn, credential=None, authority=None, **kw
) -> LogsIngestionClient:
    credential = credential or StandInCredential(authority or s.authority)
    return LogsIngestionClient(s.endpoint, credential, connection_verify=str(s.ca_cert), **kw)


def raw_post(
    s: LogsIngestionStandIn,
    body: bytes,
    *,
    gzipped: bool = True,
    token: str | None = "issue",
    stream: str = RECORDS,
    dcr: str | None = None,
    api_version: str = "2023-01-01",
    headers: dict | None = None,
) -> httpx.Response:
    h = {"Content-Type": "application/json"}
    if gzipped:
        h["Content-Encoding"] = "gzip"
    if token == "issue":
        token = s.authority.issue(MONITOR_AUDIENCE)[0]
    if token is not None:
        h["Authorization"] = f"Bearer {token}"
    h.update(headers or {})
    url = (
        f"{s.endpoint}/dataCollectionRules/{dcr or s.dcr_id}/streams/{stream}"
        f"?api-version={api_version}"
    )
    with httpx.Client(verify=trust(s.ca_cert), timeout=10) as c:
        return c.post(url, content=body, headers=h)


def error_of(exc: HttpResponseError) -> dict:
    return exc.response.json()["error"]


# ---------------------------------------------------------------- success


def test_sdk_upload_lands_as_records_gzip(standin):
    cred = StandInCredential(standin.authority)
    client = client_for(standin, cred)
    logs = [record(i) for i in range(5)]
    client.upload(standin.dcr_id, RECORDS, logs)
    client.upload("dcr-bbbb", HEARTBEATS, [heartbeat()])

    assert standin.records(RECORDS) == logs
    assert standin.records(HEARTBEATS) == [heartbeat()]
    assert cred.scopes[0] == ("https://monitor.azure.com/.default",)
    (first, second) = standin.history()
    assert (first.status, first.encoding, first.records, first.subject) == (
        204,
        "gzip",
        5,
        "system-assigned",
    )
    assert first.compressed < first.uncompressed == len(json.dumps(logs).encode())
    st = standin.stats(RECORDS)
    assert (st.requests, st.records, st.compressed_bytes) == (1, 5, first.compressed)
    assert second.dcr_id == "dcr-bbbb"


def test_plain_json_is_accepted_and_nulls_allowed(standin):
    body = json.dumps([record(1, Outcome=None, Resources=None, NoticeSeconds=3)]).encode()
    r = raw_post(standin, body, gzipped=False)
    assert r.status_code == 204 and r.content == b""
    assert standin.history()[-1].encoding == ""
    assert standin.records(RECORDS)[0]["NoticeSeconds"] == 3  # an integer is a fine real


def test_sdk_chunks_a_large_upload_within_the_limits(standin):
    logs = [record(i, Description="d" * 400) for i in range(6000)]  # ~7 MB of JSON
    client_for(standin).upload(standin.dcr_id, RECORDS, logs)
    assert standin.wait_for(RECORDS, 6000, timeout=1) == logs
    st = standin.stats(RECORDS)
    assert st.requests >= 6 and {h.status for h in standin.history()} == {204}
    assert st.max_compressed <= MAX_BODY_BYTES
    # the SDK sizes its chunks by the records alone, so its bodies carry ", " per record beyond
    # 1 MiB: accepted, as the real service accepts the SDK's chunks
    assert MAX_BODY_BYTES < st.max_uncompressed <= MAX_BODY_BYTES + 2 * 1000


def test_long_field_values_are_truncated_to_64_kb(standin):
    long_text = "é" * 40_000  # 80,000 UTF-8 bytes
    client_for(standin).upload(
        standin.dcr_id, RECORDS, [record(1, Description=long_text, Resources=["x" * 70_000])]
    )
    (got,) = standin.records(RECORDS)
    assert len(got["Description"].encode()) == 64 * 1024 and long_text.startswith(
        got["Description"]
    )
    assert isinstance(got["Resources"], str) and len(got["Resources"].encode()) == 64 * 1024
    assert standin.stats(RECORDS).truncated_fields == 2


# ---------------------------------------------------------------- identity


def test_missing_and_forged_tokens_are_401(standin):
    r = raw_post(standin, gzip.compress(b"[]"), token=None)
    assert r.status_code == 401 and r.json()["error"]["code"] == "InvalidToken"
    assert 'error="invalid_token"' in r.headers["WWW-Authenticate"]

    other = TokenAuthority()  # a token the stand-in never issued
    with pytest.raises(ClientAuthenticationError) as err:
        client_for(standin, authority=other).upload(standin.dcr_id, RECORDS, [record()])
    assert err.value.status_code == 401 and "signature" in error_of(err.value)["message"]
    assert standin.records(RECORDS) == []


def test_expired_and_wrong_audience_tokens_are_401(standin):
    expired = StandInCredential(standin.authority, lifetime=-10)
    with pytest.raises(HttpResponseError) as err:
        client_for(standin, expired).upload(standin.dcr_id, RECORDS, [record()])
    assert err.value.status_code == 401 and "expired" in error_of(err.value)["message"]

    eventhubs = StandInCredential(standin.authority, audience="https://eventhubs.azure.net")
    with pytest.raises(HttpResponseError) as err:
        client_for(standin, eventhubs).upload(standin.dcr_id, RECORDS, [record()])
    assert err.value.status_code == 401 and "audience" in error_of(err.value)["message"]


def test_subject_without_the_role_is_403(standin):
    standin.set_allowed_subjects({"agent-identity"})
    with pytest.raises(HttpResponseError) as err:
        client_for(standin, StandInCredential(standin.authority, subject="someone-else")).upload(
            standin.dcr_id, RECORDS, [record()]
        )
    assert err.value.status_code == 403
    assert error_of(err.value) == {
        "code": "OperationFailed",
        "message": "The authentication token provided does not have access to ingest data for "
        f"the data collection rule with immutable Id '{standin.dcr_id}'.",
    }
    client_for(standin, StandInCredential(standin.authority, subject="agent-identity")).upload(
        standin.dcr_id, RECORDS, [record()]
    )
    assert len(standin.records(RECORDS)) == 1


# ---------------------------------------------------------------- addressing


def test_unknown_dcr_is_404_and_unknown_stream_400(standin):
    client = client_for(standin)
    with pytest.raises(ResourceNotFoundError) as err:
        client.upload("dcr-unknown", RECORDS, [record()])
    assert err.value.status_code == 404 and "dcr-unknown" in error_of(err.value)["message"]
    with pytest.raises(HttpResponseError) as err:
        client.upload(standin.dcr_id, "Custom-Nope", [record()])
    assert err.value.status_code == 400 and error_of(err.value)["code"] == "InvalidStream"
    assert "Custom-Nope" in error_of(err.value)["message"]
    assert standin.stats(RECORDS).records == 0


def test_api_version_and_path_are_checked(standin):
    with pytest.raises(HttpResponseError) as err:
        client_for(standin, api_version="2020-01-01").upload(standin.dcr_id, RECORDS, [record()])
    assert err.value.status_code == 400 and error_of(err.value)["code"] == "InvalidApiVersion"
    r = raw_post(standin, gzip.compress(b"[]"), api_version="")
    assert r.status_code == 400
    with httpx.Client(verify=trust(standin.ca_cert)) as c:
        assert (
            c.post(
                f"{standin.endpoint}/dataCollectionRules/{standin.dcr_id}", content=b"[]"
            ).status_code
            == 404
        )
        assert (
            c.put(
                f"{standin.endpoint}/dataCollectionRules/{standin.dcr_id}/streams/{RECORDS}"
                "?api-version=2023-01-01",
                content=b"[]",
            ).status_code
            == 405
        )


# ---------------------------------------------------------------- content


def test_undeclared_column_is_400_naming_it(standin):
    with pytest.raises(HttpResponseError) as err:
        client_for(standin).upload(standin.dcr_id, RECORDS, [record(0), record(1, Colour="blue")])
    assert err.value.status_code == 400
    e = error_of(err.value)
    assert (
        e["code"] == "InvalidPayload" and "Record 1" in e["message"] and "'Colour'" in e["message"]
    )
    assert standin.records(RECORDS) == []  # all or nothing


@pytest.mark.parametrize("table,row", [(RECORDS, record), (HEARTBEATS, heartbeat)])
@pytest.mark.parametrize("how", ["absent", "null"])
def test_a_row_without_time_generated_is_refused_through_the_sdk(standin, table, row, how):
    bad = row()
    if how == "absent":
        del bad["TimeGenerated"]
    else:
        bad["TimeGenerated"] = None
    with pytest.raises(HttpResponseError) as err:
        client_for(standin).upload(standin.dcr_id, table, [row(), bad])
    assert err.value.status_code == 400
    e = error_of(err.value)
    assert e["code"] == "InvalidPayload" and "Record 1" in e["message"]
    assert "'TimeGenerated'" in e["message"]
    assert standin.records(table) == []  # all or nothing


@pytest.mark.parametrize(
    "column,value",
    [
        ("DurationInSeconds", "60"),
        ("DurationInSeconds", 2**31),
        ("DurationInSeconds", 1.5),
        ("DocumentIncarnation", True),
        ("NoticeSeconds", "9"),
        ("AffectsThisVm", 1),
        ("TimeGenerated", "yesterday"),
        ("TimeGenerated", 1649715118),
        ("EventId", 42),
    ],
)
def test_wrong_type_is_400_naming_the_column(standin, column, value):
    with pytest.raises(HttpResponseError) as err:
        client_for(standin).upload(standin.dcr_id, RECORDS, [record(0, **{column: value})])
    assert err.value.status_code == 400
    assert f"column '{column}'" in error_of(err.value)["message"]
    assert standin.records(RECORDS) == []


def test_heartbeat_types_come_from_the_contract(standin):
    with pytest.raises(HttpResponseError) as err:  # Polls is long in the heartbeat table
        client_for(standin).upload(standin.dcr_id, HEARTBEATS, [heartbeat(Polls="many")])
    assert "column 'Polls'" in error_of(err.value)["message"]
    with pytest.raises(HttpResponseError) as err:  # a records column is not a heartbeat column
        client_for(standin).upload(standin.dcr_id, HEARTBEATS, [heartbeat(EventId="x")])
    assert "column 'EventId'" in error_of(err.value)["message"]


@pytest.mark.parametrize(
    "body,gzipped,words",
    [
        (b"{not json", False, "malformed JSON"),
        (b'{"a": 1}', False, "JSON array"),
        (b"[1, 2]", False, "Record 0"),
        (b"[]" * 3, True, "malformed JSON"),
        (b"not gzip at all", None, "gzip"),
    ],
)
def test_malformed_bodies_are_400(standin, body, gzipped, words):
    data = gzip.compress(body) if gzipped else body
    r = raw_post(standin, data, gzipped=gzipped is not False)
    assert r.status_code == 400 and words in r.json()["error"]["message"]


def test_content_type_and_encoding_are_checked(standin):
    assert (
        raw_post(standin, b"[]", gzipped=False, headers={"Content-Type": "text/plain"}).status_code
        == 415
    )
    assert (
        raw_post(standin, b"[]", gzipped=False, headers={"Content-Encoding": "br"}).json()["error"][
            "code"
        ]
        == "InvalidContentEncoding"
    )


# ---------------------------------------------------------------- size


def test_body_over_1_mb_is_413(standin):
    big = os.urandom(MAX_BODY_BYTES + 1)  # incompressible: over the limit on the wire
    r = raw_post(standin, big, gzipped=True)
    assert r.status_code == 413 and r.json()["error"]["code"] == "ContentLengthLimitExceeded"
    # small on the wire, too large once inflated
    logs = [record(i, Description="a" * 1000) for i in range(1000)]
    data = json.dumps(logs, separators=(",", ":")).encode()
    assert len(data) > MAX_BODY_BYTES
    r = raw_post(standin, gzip.compress(data))
    assert r.status_code == 413 and len(gzip.compress(data)) < 100_000
    assert raw_post(standin, data, gzipped=False).status_code == 413
    # exactly at the limit is fine: records' JSON of 1 MiB, punctuation not counted
    one = json.dumps(record(0, Description="")).encode()
    pad = MAX_BODY_BYTES - len(one)
    exact = json.dumps([record(0, Description="x" * pad)]).encode()
    assert raw_post(standin, gzip.compress(exact)).status_code == 204
    over = json.dumps([record(0, Description="x" * (pad + 1))]).encode()
    assert raw_post(standin, gzip.compress(over)).status_code == 413
    assert standin.stats(RECORDS).records == 1


# ---------------------------------------------------------------- throttling and faults


def test_429_with_retry_after_is_retried_by_the_sdk(standin):
    standin.throttle_next(1, retry_after=1)
    t0 = time.monotonic()
    client_for(standin).upload(standin.dcr_id, RECORDS, [record()])
    assert time.monotonic() - t0 >= 1.0
    assert [(h.status, h.retry_after) for h in standin.history()] == [(429, "1"), (204, None)]
    assert len(standin.records(RECORDS)) == 1


def test_429_without_retry_after_is_not_retried_by_the_sdk(standin):
    standin.throttle_next(1, retry_after=None)
    with pytest.raises(HttpResponseError) as err:
        client_for(standin).upload(standin.dcr_id, RECORDS, [record()])
    assert err.value.status_code == 429 and "Retry-After" not in err.value.response.headers
    assert [h.status for h in standin.history()] == [429]
    assert standin.records(RECORDS) == []


@pytest.mark.parametrize("status", [500, 503])
def test_500_and_503_are_retried_by_the_sdk_until_it_gives_up(standin, status):
    standin.fail_next(2, status)
    client_for(standin, retry_backoff_factor=0.01).upload(standin.dcr_id, RECORDS, [record()])
    assert [h.status for h in standin.history()] == [status, status, 204]

    standin.reset()
    standin.fail_next(None, status)  # an outage
    with pytest.raises(HttpResponseError) as err:
        client_for(standin, retry_total=2, retry_backoff_factor=0.01).upload(
            standin.dcr_id, RECORDS, [record()]
        )
    assert err.value.status_code == status and len(standin.history()) == 3
    standin.clear_faults()
    client_for(standin).upload(standin.dcr_id, RECORDS, [record()])
    assert len(standin.records(RECORDS)) == 1


@pytest.mark.parametrize("status", [413, 401, 403])
def test_injected_client_errors_are_not_retried(standin, status):
    standin.fail_next(1, status)
    with pytest.raises(HttpResponseError) as err:
        client_for(standin).upload(standin.dcr_id, RECORDS, [record()])
    assert err.value.status_code == status and len(standin.history()) == 1
    client_for(standin).upload(standin.dcr_id, RECORDS, [record()])  # the fault was used up
    assert len(standin.records(RECORDS)) == 1


def test_rate_limit_per_dcr_answers_429_with_retry_after(tls_dir, authority):
    with LogsIngestionStandIn(
        tls_dir, authority, dcr_ids=("dcr-1", "dcr-2"), requests_per_minute=3
    ) as s:
        body = gzip.compress(json.dumps([record()]).encode())
        assert [raw_post(s, body, dcr="dcr-1").status_code for _ in range(3)] == [204] * 3
        r = raw_post(s, body, dcr="dcr-1")
        assert r.status_code == 429 and 1 <= int(r.headers["Retry-After"]) <= 60
        assert raw_post(s, body, dcr="dcr-2").status_code == 204  # the limit is per DCR
    with LogsIngestionStandIn(tls_dir, authority, bytes_per_minute=1000) as s:
        body = gzip.compress(json.dumps([record(i) for i in range(3)]).encode())
        assert raw_post(s, body).status_code == 204  # 2.5 KB uncompressed: volume now over
        assert raw_post(s, body).status_code == 429


def test_slow_answer(standin):
    standin.delay_next(1, 0.5)
    t0 = time.monotonic()
    client_for(standin).upload(standin.dcr_id, RECORDS, [record(1)])
    assert time.monotonic() - t0 >= 0.5

    # slower than the client waits: the SDK gives up (no retry of a POST), the batch was stored
    # anyway
    standin.delay_next(1, 1.5)
    with pytest.raises(ServiceResponseError):
        client_for(standin).upload(standin.dcr_id, RECORDS, [record(2)], read_timeout=0.5)
    assert [r["RecordId"] for r in standin.records(RECORDS)] == ["rid-000001", "rid-000002"]
    assert len(standin.history()) == 2


def test_dropped_connection(standin):
    client = client_for(standin)
    client.upload(standin.dcr_id, RECORDS, [record(1)])  # a kept-alive connection, then dropped
    standin.drop_next(1)
    with pytest.raises((ServiceResponseError, ServiceRequestError)):
        client.upload(standin.dcr_id, RECORDS, [record(2)])
    assert [h.status for h in standin.history()] == [204, 0]  # not retried by the SDK
    client.upload(standin.dcr_id, RECORDS, [record(3)])
    assert [r["RecordId"] for r in standin.records(RECORDS)] == ["rid-000001", "rid-000003"]


def test_plain_http_is_refused(standin):
    with pytest.raises(httpx.HTTPError):
        httpx.post(
            f"http://localhost:{standin.port}/dataCollectionRules/{standin.dcr_id}/streams/"
            f"{RECORDS}?api-version=2023-01-01",
            content=b"[]",
            timeout=5,
        )
    # and the SDK itself will not send a bearer token over http
    plain = LogsIngestionClient(
        f"http://localhost:{standin.port}", StandInCredential(standin.authority)
    )
    with pytest.raises(ServiceRequestError, match=r"non-TLS|https"):
        plain.upload(standin.dcr_id, RECORDS, [record()])
    # nor does a client that does not trust the stand-in's CA get through
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{standin.endpoint}/_standin/stats", timeout=5)
    assert standin.history() == []


# ---------------------------------------------------------------- reading back


def test_records_readable_over_https_without_a_token(standin):
    client_for(standin).upload(standin.dcr_id, RECORDS, [record(i) for i in range(3)])
    client_for(standin).upload(standin.dcr_id, HEARTBEATS, [heartbeat()])
    with httpx.Client(verify=trust(standin.ca_cert), timeout=5) as c:
        r = c.get(f"{standin.endpoint}/_standin/records", params={"stream": RECORDS})
        assert r.status_code == 200
        assert r.json() == {"stream": RECORDS, "count": 3, "records": [record(i) for i in range(3)]}
        everything = c.get(f"{standin.endpoint}/_standin/records").json()["streams"]
        assert everything[HEARTBEATS] == [heartbeat()]
        assert (
            c.get(f"{standin.endpoint}/_standin/records", params={"stream": "x"}).status_code == 404
        )
        stats = c.get(f"{standin.endpoint}/_standin/stats").json()
        assert stats["streams"][RECORDS]["records"] == 3 and stats["answers"] == {"204": 2}


def test_wait_for(standin):
    with pytest.raises(TimeoutError):
        standin.wait_for(RECORDS, 1, timeout=0.1)
    standin.delay_next(1, 0.3)  # answered late, stored before
    t = threading.Thread(
        target=client_for(standin).upload, args=(standin.dcr_id, RECORDS, [record()])
    )
    t.start()
    assert len(standin.wait_for(RECORDS, 1, timeout=5)) == 1
    t.join()


def test_records_persisted_to_jsonl(tls_dir, authority, tmp_path):
    path = tmp_path / "accepted.jsonl"
    with LogsIngestionStandIn(tls_dir, authority, records_file=path) as s:
        client_for(s).upload(s.dcr_id, RECORDS, [record(1), record(2)])
        client_for(s).upload(s.dcr_id, HEARTBEATS, [heartbeat()])
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert lines == [
        {"stream": RECORDS, "record": record(1)},
        {"stream": RECORDS, "record": record(2)},
        {"stream": HEARTBEATS, "record": heartbeat()},
    ]


# ---------------------------------------------------------------- command line


def test_command_runs_until_sigterm(tmp_path):
    key = tmp_path / "token.key"
    code = (
        "import argparse, sys\n"
        "from se_forwarder_testbed.standins import command\n"
        "p = argparse.ArgumentParser(); command.configure(p)\n"
        "sys.exit(command.run(p.parse_args(sys.argv[1:])))\n"
    )
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            code,
            "logs-ingestion",
            "--tls-dir",
            str(tmp_path / "tls"),
            "--token-key-file",
            str(key),
            "--dcr-id",
            "dcr-cli",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        info = json.loads(proc.stdout.readline())
        assert info["endpoint"].startswith("https://localhost:") and info["dcr_ids"] == ["dcr-cli"]
        authority = TokenAuthority.from_key_file(key)  # the key the stand-in created
        client = LogsIngestionClient(
            info["endpoint"], StandInCredential(authority), connection_verify=info["ca_cert"]
        )
        client.upload("dcr-cli", RECORDS, [record(7)])
        got = httpx.get(
            info["records_url"], params={"stream": RECORDS}, verify=trust(info["ca_cert"])
        ).json()
        assert got["records"] == [record(7)]
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


# ---------------------------------------------------------------- managed identity, end to end


def test_managed_identity_from_the_imds_simulator(standin, monkeypatch):
    """The real ManagedIdentityCredential fetches tokens from the simulator's IMDS token
    endpoint."""
    from azure.identity import ManagedIdentityCredential

    from se_forwarder_testbed.simulator.scenario import IdentitySpec, Scenario
    from se_forwarder_testbed.simulator.server import Simulator

    agent = IdentitySpec(
        client_id="11111111-1111-4111-8111-111111111111",
        object_id="22222222-2222-4222-8222-222222222222",
        resource_id="/subscriptions/s/resourceGroups/rg/providers/"
        "Microsoft.ManagedIdentity/userAssignedIdentities/agent",
    )
    with Simulator(Scenario(identities=[agent]), token_authority=standin.authority) as sim:
        monkeypatch.setenv("AZURE_POD_IDENTITY_AUTHORITY_HOST", sim.url)
        standin.set_allowed_subjects({agent.client_id})  # only it holds the role on the DCR

        user_assigned = ManagedIdentityCredential(client_id=agent.client_id)
        client_for(standin, user_assigned).upload(standin.dcr_id, RECORDS, [record(1)])
        assert standin.history()[-1].subject == agent.client_id

        system_assigned = ManagedIdentityCredential()
        with pytest.raises(HttpResponseError) as err:
            client_for(standin, system_assigned).upload(standin.dcr_id, RECORDS, [record(2)])
        assert err.value.status_code == 403
        token_calls = [
            r for r in sim.requests if r.path.startswith("/metadata/identity/oauth2/token")
        ]
        assert len(token_calls) == 2  # one per credential; the SDK caches tokens
    assert [r["RecordId"] for r in standin.records(RECORDS)] == ["rid-000001"]
