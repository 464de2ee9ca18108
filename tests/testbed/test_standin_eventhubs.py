"""The Event Hubs stand-in, driven by the real azure-eventhub SDK (pure-Python AMQP transport)."""

from __future__ import annotations

import socket
import struct
import threading
import time

import pytest
from azure.core.credentials import AccessToken, AzureSasCredential
from azure.eventhub import EventData, EventHubProducerClient, TransportType
from azure.eventhub.exceptions import AuthenticationError, EventDataSendError, EventHubError

from se_forwarder_testbed.standins import amqp_frames
from se_forwarder_testbed.standins import tls as tls_files
from se_forwarder_testbed.standins.eventhubs import (
    EventHubsStandIn,
    make_sas_token,
    partition_for_key,
)
from se_forwarder_testbed.standins.tokens import (
    EVENTHUBS_AUDIENCE,
    MONITOR_AUDIENCE,
    TokenAuthority,
)

pytestmark = [pytest.mark.e2e, pytest.mark.tls]

HUB = "scheduled-events"
FAST = {"retry_total": 0}


class AuthorityCredential:
    """Test double for Entra ID: a TokenCredential whose tokens come from the TokenAuthority."""

    def __init__(
        self,
        authority: TokenAuthority,
        subject: str = "sender",
        audience: str = EVENTHUBS_AUDIENCE,
        lifetime: int = 3600,
    ) -> None:
        self.authority, self.subject, self.audience, self.lifetime = (
            authority,
            subject,
            audience,
            lifetime,
        )
        self.scopes: list[tuple[str, ...]] = []

    def get_token(self, *scopes: str, **_: object) -> AccessToken:
        self.scopes.append(scopes)
        token, exp = self.authority.issue(
            self.audience, subject=self.subject, lifetime=self.lifetime
        )
        return AccessToken(token, exp)


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> tls_files.TlsFiles:
    return tls_files.generate(tmp_path_factory.mktemp("tls"))


@pytest.fixture(scope="module")
def _plain_standin(authority: TokenAuthority):
    with EventHubsStandIn(
        hubs={HUB: 4, "other": 2},
        token_authority=authority,
        allowed_subjects={"sender"},
        receiver_subjects=(),
    ) as s:
        yield s


@pytest.fixture
def standin(_plain_standin: EventHubsStandIn) -> EventHubsStandIn:
    _plain_standin.clear()
    _plain_standin.clear_faults()
    yield _plain_standin
    _plain_standin.clear_faults()
    assert _plain_standin.errors == []


@pytest.fixture(scope="module")
def tls_standin(certs: tls_files.TlsFiles, authority: TokenAuthority):
    with EventHubsStandIn(
        tls=certs, hubs={HUB: 4}, token_authority=authority, allowed_subjects={"sender"}
    ) as s:
        yield s
        assert s.errors == []


def plain_producer(s: EventHubsStandIn, hub: str = HUB, **kw) -> EventHubProducerClient:
    return EventHubProducerClient.from_connection_string(s.connection_string(hub), **kw)


def tls_kwargs(s: EventHubsStandIn, certs: tls_files.TlsFiles) -> dict:
    return {
        "custom_endpoint_address": s.endpoint,
        "connection_verify": str(certs.ca_cert),
        "transport_type": TransportType.Amqp,
    }


def send_one(producer: EventHubProducerClient, **kw) -> None:
    with producer as p:
        p.send_batch([record(0)], **kw)


def record(i: int, vm: str = "vm-1") -> EventData:
    e = EventData(f'{{"RecordId":"r{i}","VmId":"{vm}"}}'.encode())
    e.content_type = "application/json"
    e.properties = {"Phase": "FirstSeen", "EventType": "Reboot", "Table": "ScheduledEvents", "n": i}
    return e


# ------------------------------------------------------------------------------ framing (unit)


def _frame(body: bytes, ftype: int = 0, channel: int = 0) -> bytes:
    return struct.pack(">IBBH", 8 + len(body), 2, ftype, channel) + body


def test_pad_frame_fills_every_performative_to_its_full_length():
    # end with no fields at all (list0), as proton writes it
    padded = amqp_frames.pad_frame(_frame(b"\x00\x53\x17\x45"))
    assert padded == _frame(b"\x00\x53\x17\xc0\x02\x01\x40")
    # disposition [role=true, first=0, last=None omitted, settled=true, state omitted]: 4 of 6
    short = b"\x00\x53\x15\xc0\x05\x04\x41\x43\x40\x41"
    size = struct.unpack_from(">I", amqp_frames.pad_frame(_frame(short)))[0]
    perf, end = amqp_frames.decode(amqp_frames.pad_frame(_frame(short)), 8)
    assert perf.descriptor == 0x15 and perf.value == [True, 0, None, True, None, None]
    assert size == end
    # transfer with a payload after the performative: the payload is kept byte for byte
    payload = b"\x00\x53\x75\xa0\x03abc"
    tr = b"\x00\x53\x14\xc0\x03\x02\x43\x43" + payload
    out = amqp_frames.pad_frame(_frame(tr, channel=3))
    perf, end = amqp_frames.decode(out, 8)
    assert len(perf.value) == 11 and out[end:] == payload and out[6:8] == b"\x00\x03"
    # a list8 that would grow past 255 bytes becomes a list32
    big = b"\x00\x53\x12\xc0\xff\x03" + b"\xa1\xfa" + b"n" * 250 + b"\x43\x41"
    perf, _ = amqp_frames.decode(amqp_frames.pad_frame(_frame(big)), 8)
    assert len(perf.value) == 14 and perf.value[0] == "n" * 250
    # already full, SASL frames and empty (heartbeat) frames go through untouched
    full = _frame(b"\x00\x53\x18\xc0\x02\x01\x40")
    assert amqp_frames.pad_frame(full) == full
    sasl = _frame(b"\x00\x53\x44\xc0\x03\x01\x50\x00", ftype=1)
    assert amqp_frames.pad_frame(sasl) == sasl


def test_outbound_padder_handles_headers_and_frames_split_anywhere():
    stream = (
        b"AMQP\x03\x01\x00\x00"
        + _frame(b"\x00\x53\x44\xc0\x03\x01\x50\x00", ftype=1)
        + b"AMQP\x00\x01\x00\x00"
        + _frame(b"\x00\x53\x17\x45")
        + struct.pack(">IBBH", 8, 2, 0, 0)
    )
    expected = (
        b"AMQP\x03\x01\x00\x00"
        + _frame(b"\x00\x53\x44\xc0\x03\x01\x50\x00", ftype=1)
        + b"AMQP\x00\x01\x00\x00"
        + _frame(b"\x00\x53\x17\xc0\x02\x01\x40")
        + struct.pack(">IBBH", 8, 2, 0, 0)
    )
    for step in (1, 3, 7, len(stream)):
        padder = amqp_frames.OutboundPadder()
        out = b"".join(padder.feed(stream[i : i + step]) for i in range(0, len(stream), step))
        assert out == expected


def test_the_sdk_needs_the_padding(standin, monkeypatch):
    """Without the padding layer, proton's short frames break SDK 5.15.1 (the interop trap)."""
    monkeypatch.setattr(amqp_frames.OutboundPadder, "feed", lambda self, data: data)
    with pytest.raises(EventHubError, match="list index out of range"):
        send_one(plain_producer(standin, **FAST))
    assert standin.events == []


# ------------------------------------------------------------------------------ sending


def test_batch_with_partition_key_arrives_intact_and_in_order(standin):
    with plain_producer(standin) as p:
        batch = p.create_batch(partition_key="vm-7")
        for i in range(50):
            batch.add(record(i, "vm-7"))
        p.send_batch(batch)
        p.send_batch([record(50, "vm-7"), record(51, "vm-7")], partition_key="vm-7")
    got = standin.wait_for(52, timeout=5)
    assert [e.json()["RecordId"] for e in got] == [f"r{i}" for i in range(52)]
    expected_partition = str(partition_for_key("vm-7", 4))
    for i, e in enumerate(got):
        assert e.hub == HUB and e.partition_id == expected_partition
        assert e.body == f'{{"RecordId":"r{i}","VmId":"vm-7"}}'.encode()
        assert e.content_type == "application/json"
        assert e.properties == {
            "Phase": "FirstSeen",
            "EventType": "Reboot",
            "Table": "ScheduledEvents",
            "n": i,
        }
        assert e.annotations["x-opt-partition-key"] == "vm-7" and e.partition_key == "vm-7"
        assert e.sequence_number == i
    assert standin.by_property("n", 3)[0].json()["RecordId"] == "r3"
    assert len(standin.events_for(HUB, expected_partition)) == 52
    assert list(standin.by_partition(HUB)) == [expected_partition]


def test_same_key_same_partition_and_keys_spread(standin):
    keys = [f"vm-{i}" for i in range(12)]
    with plain_producer(standin) as p:
        for k in keys + keys:
            p.send_batch([record(0, k)], partition_key=k)
    got = standin.wait_for(24, timeout=5)
    by_key: dict[str, set[str]] = {}
    for e in got:
        by_key.setdefault(e.partition_key, set()).add(e.partition_id)
    assert all(len(v) == 1 for v in by_key.values())
    assert len({next(iter(v)) for v in by_key.values()}) > 1


def test_partition_specific_sender_and_plain_event(standin):
    with plain_producer(standin) as p:
        p.send_batch([record(1), record(2)], partition_id="2")
        p.send_event(record(3), partition_id="1")  # a single message, not a batch
    got = standin.wait_for(3, timeout=5)
    assert [(e.partition_id, e.json()["RecordId"]) for e in got] == [
        ("2", "r1"),
        ("2", "r2"),
        ("1", "r3"),
    ]
    assert got[2].properties["Phase"] == "FirstSeen" and got[2].content_type == "application/json"


def test_management_reads(standin):
    with plain_producer(standin) as p:
        assert p.get_partition_ids() == ["0", "1", "2", "3"]
        props = p.get_eventhub_properties()
        assert props["eventhub_name"] == HUB and props["partition_ids"] == ["0", "1", "2", "3"]
        assert abs(props["created_at"].timestamp() - standin.created_at) < 1
        p.send_batch([record(1), record(2)], partition_id="3")
        part = p.get_partition_properties("3")
        assert part["id"] == "3" and part["is_empty"] is False
    with plain_producer(standin, hub="other") as p:
        assert p.get_partition_ids() == ["0", "1"]


def test_tls_with_token_credential(tls_standin, certs, authority):
    tls_standin.clear()
    cred = AuthorityCredential(authority)
    with EventHubProducerClient(
        tls_standin.namespace, HUB, cred, **tls_kwargs(tls_standin, certs)
    ) as p:
        p.send_batch([record(1), record(2)], partition_key="vm-1")
        assert p.get_partition_ids() == ["0", "1", "2", "3"]
    got = tls_standin.wait_for(2, timeout=5)
    assert [e.json()["RecordId"] for e in got] == ["r1", "r2"]
    assert cred.scopes and cred.scopes[0] == ("https://eventhubs.azure.net//.default",)


def test_tls_with_sas_connection_string(tls_standin, certs):
    tls_standin.clear()
    cs = tls_standin.connection_string(HUB)
    assert "UseDevelopmentEmulator" not in cs
    with EventHubProducerClient.from_connection_string(cs, **tls_kwargs(tls_standin, certs)) as p:
        p.send_batch([record(5)], partition_id="0")
    assert tls_standin.wait_for(1, timeout=5)[0].partition_id == "0"


def test_tls_refuses_a_client_that_does_not_trust_the_ca(tls_standin):
    # no connection_verify: the system trust store does not know the generated CA
    with pytest.raises(EventHubError):
        send_one(
            EventHubProducerClient.from_connection_string(
                tls_standin.connection_string(HUB),
                custom_endpoint_address=tls_standin.endpoint,
                transport_type=TransportType.Amqp,
                **FAST,
            )
        )


# ------------------------------------------------------------------------------ authentication


def token_producer(s: EventHubsStandIn, credential, **kw) -> EventHubProducerClient:
    return EventHubProducerClient(s.namespace, HUB, credential, use_tls=False, **FAST, **kw)


def test_bad_sas_key_is_refused(standin):
    cs = standin.connection_string(HUB).replace("SharedAccessKey=", "SharedAccessKey=x")
    refused = standin.stats["refused_tokens"]
    with pytest.raises(AuthenticationError):
        send_one(EventHubProducerClient.from_connection_string(cs, **FAST))
    assert standin.stats["refused_tokens"] > refused
    assert standin.events == []


def test_expired_sas_token_is_refused(standin):
    refused = standin.stats["refused_tokens"]
    token = standin.sas_token(HUB, expiry=time.time() - 60)
    with pytest.raises(AuthenticationError):
        send_one(token_producer(standin, AzureSasCredential(token)))
    assert standin.stats["refused_tokens"] > refused
    assert standin.events == []
    # the same, still valid, is accepted
    send_one(token_producer(standin, AzureSasCredential(standin.sas_token(HUB))))
    assert len(standin.wait_for(1, timeout=5)) == 1


def test_sas_token_for_another_hub_cannot_send(standin):
    with pytest.raises(AuthenticationError):
        send_one(token_producer(standin, AzureSasCredential(standin.sas_token("other"))))
    assert standin.events == []


@pytest.mark.parametrize(
    ("audience", "lifetime"), [(MONITOR_AUDIENCE, 3600), (EVENTHUBS_AUDIENCE, -30)]
)
def test_jwt_wrong_audience_or_expired_is_refused(standin, authority, audience, lifetime):
    refused = standin.stats["refused_tokens"]
    cred = AuthorityCredential(authority, audience=audience, lifetime=lifetime)
    with pytest.raises(AuthenticationError):
        send_one(token_producer(standin, cred))
    assert standin.stats["refused_tokens"] > refused
    assert standin.events == []


def test_jwt_from_another_authority_is_refused(standin):
    refused = standin.stats["refused_tokens"]
    with pytest.raises(AuthenticationError):
        send_one(token_producer(standin, AuthorityCredential(TokenAuthority())))
    assert standin.stats["refused_tokens"] > refused
    assert standin.events == []


def test_subject_without_the_sender_role_is_refused_at_attach(standin, authority):
    attaches = standin.stats["refused_attaches"]
    with pytest.raises(AuthenticationError) as info:
        send_one(token_producer(standin, AuthorityCredential(authority, "intruder")))
    # the attach is refused (amqp:unauthorized-access); the SDK then rebuilds its producer, whose
    # $management read is refused too, and raises that
    assert "claim(s) are required" in str(info.value)
    assert standin.stats["refused_attaches"] > attaches
    assert standin.events == []
    # the subject that holds the role gets through
    send_one(token_producer(standin, AuthorityCredential(authority, "sender")))
    assert len(standin.wait_for(1, timeout=5)) == 1


def test_unknown_hub_is_not_found(standin):
    with pytest.raises(EventHubError, match="could not be found"):
        send_one(plain_producer(standin, hub="nope", **FAST))


# ------------------------------------------------------------------------------ faults


def test_server_busy_surfaces_as_event_data_send_error_then_recovers(standin):
    with plain_producer(standin) as p:
        p.send_batch([record(0)])
        # the SDK resends a rejected batch once on a rebuilt link: 1 rejection is hidden ...
        standin.reject_next(1)
        p.send_batch([record(1)])
        # ... 2 are not
        before = standin.stats["rejected"]
        standin.reject_next(2)
        with pytest.raises(EventDataSendError) as info:
            p.send_batch([record(2)])
        assert "com.microsoft:server-busy" in str(info.value)
        assert standin.stats["rejected"] - before == 2
        p.send_batch([record(3)])
    got = standin.wait_for(3, timeout=5)
    assert [e.json()["RecordId"] for e in got] == ["r0", "r1", "r3"]


def test_max_message_size_is_announced_and_enforced(authority):
    with EventHubsStandIn(hubs={HUB: 2}, max_message_size=64 * 1024) as s:
        with plain_producer(s) as p:
            assert p.create_batch().max_size_in_bytes == 64 * 1024
            batch = p.create_batch()

            def fill() -> None:
                for _ in range(10_000):
                    batch.add(EventData(b"x" * 1000))

            with pytest.raises(ValueError):
                fill()
            p.send_batch(batch)
            assert 50 < len(batch) < 66 and batch.size_in_bytes <= 64 * 1024
            assert len(s.wait_for(len(batch), timeout=5)) == len(batch)
            # the service enforces its limit on the transfer itself, whatever the client believed
            s.set_max_message_size(2000)
            with pytest.raises(EventDataSendError, match="exceeds the limit"):
                p.send_batch([EventData(b"y" * 5000)])
        with plain_producer(s) as p:  # a new link is told the new limit
            assert p.create_batch().max_size_in_bytes == 2000
    with EventHubsStandIn(hubs={HUB: 2}) as s, plain_producer(s) as p:
        assert p.create_batch().max_size_in_bytes == 1024 * 1024


def test_dropped_connections_are_recovered_by_the_sdk(standin):
    with plain_producer(standin) as p:
        p.send_batch([record(0)])
        standin.drop_connections()
        p.send_batch([record(1)])  # the SDK reconnects
        standin.drop_next(1)  # the next transfer is lost with its connection, never stored
        p.send_batch([record(2)])  # ... and the SDK's retry delivers it
    got = standin.wait_for(3, timeout=5)
    assert [e.json()["RecordId"] for e in got] == ["r0", "r1", "r2"]
    assert standin.stats["dropped_connections"] >= 2


def test_dropped_connection_twice_without_retries_raises(standin):
    with plain_producer(standin, **FAST) as p:
        standin.drop_next(2)  # the SDK reconnects once even without retries; not twice
        with pytest.raises(EventHubError):
            p.send_batch([record(0)])
    assert standin.events == []


def test_slow_acceptance(standin):
    with plain_producer(standin) as p:
        p.send_batch([record(0)])
        standin.set_accept_delay(0.6)
        t0 = time.monotonic()
        p.send_batch([record(1)])
        assert time.monotonic() - t0 >= 0.6
    assert len(standin.wait_for(2, timeout=5)) == 2


def test_wait_for_times_out_with_a_count(standin):
    with pytest.raises(TimeoutError, match="0 of 1"):
        standin.wait_for(1, timeout=0.1)


def test_concurrent_producers(standin):
    def send(vm: str) -> None:
        with plain_producer(standin) as p:
            for i in range(5):
                p.send_batch([record(i, vm)], partition_key=vm)

    threads = [threading.Thread(target=send, args=(f"vm-{k}",)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    got = standin.wait_for(20, timeout=5)
    for k in range(4):
        mine = [e.json()["RecordId"] for e in got if e.partition_key == f"vm-{k}"]
        assert mine == [f"r{i}" for i in range(5)]


def test_sas_token_helper_matches_the_sdk():
    from azure.eventhub._pyamqp.utils import generate_sas_token

    expiry = int(time.time()) + 100
    assert make_sas_token("sb://h:1/hub", "k", "secret", expiry) == generate_sas_token(
        "sb://h:1/hub", "k", "secret", expiry
    )


def test_closed_clients_leave_no_connections_behind(standin):
    for _ in range(3):
        send_one(plain_producer(standin))
    deadline = time.monotonic() + 5
    while standin.open_connections and time.monotonic() < deadline:
        time.sleep(0.05)
    assert standin.open_connections == 0
    assert standin.stats["connections"] >= 3


def test_stops_cleanly():
    s = EventHubsStandIn().start()
    with plain_producer(s, **FAST) as p:
        p.send_batch([record(0)])
        port = s.port
        s.stop()
        assert not s.running
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
        t0 = time.monotonic()
        with pytest.raises(EventHubError):
            p.send_batch([record(1)], timeout=5)
        assert time.monotonic() - t0 < 30
    s.stop()  # idempotent
    assert threading.active_count() < 50
