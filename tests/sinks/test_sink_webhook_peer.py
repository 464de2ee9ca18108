"""The webhook sink against a hostile peer (raw sockets on loopback): every answer is read within
a bounded size and an overall deadline, and a receiver quoting the secret URL back never gets it
into an error, the dead-letter file, the log or ``status``."""

from __future__ import annotations

import json
import resource
import time
from urllib.parse import quote

import pytest
from helpers.hostile_http import HostilePeer
from helpers.sink_answers import nothing_delivered

from se_forwarder import backoff
from se_forwarder.delivery import DeliveryPool
from se_forwarder.errors import DeliveryError, Verdict
from se_forwarder.outbox import OutboxRow, Store
from se_forwarder.sinks.webhook.sink import WebhookSink

SECRET = "services/T0HOSTILE1/B0HOSTILE2/c2VjcmV0LWhvc3RpbGUta2V5"
PIECES = ("T0HOSTILE1", "B0HOSTILE2", "c2VjcmV0LWhvc3RpbGUta2V5")


def row(seq: int = 1) -> OutboxRow:
    rec = {"RecordId": "r-1", "Phase": "FirstSeen", "EventId": "e-1", "EventType": "Reboot"}
    return OutboxRow.raw(
        "records", "vm-a", json.dumps(rec), seq=seq, phase="FirstSeen", event_type="Reboot"
    )


@pytest.fixture
def peer():
    with HostilePeer() as p:
        yield p


def send(peer: HostilePeer, mode: str, timeout: float = 2.0) -> tuple[DeliveryError, float]:
    t0 = time.monotonic()
    with WebhookSink(peer.url(mode, SECRET), timeout=timeout) as sink:
        err = nothing_delivered(sink.send([row()]))
    return err.value, time.monotonic() - t0


def test_an_answer_that_never_ends_is_read_a_few_kilobytes_deep():
    # What the peer manages to send before the client hangs up is the client's reading plus the
    # two kernel buffers between them (loopback autotunes the receiving one up to
    # net.ipv4.tcp_rmem's maximum, 32 MiB here), however little the client reads: an unbounded
    # client reads on until the peer gives up, so the peer gives up far beyond those buffers.
    give_up = 256 * 1024 * 1024
    with HostilePeer(give_up_after=give_up) as peer:
        rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        err, seconds = send(peer, "huge", timeout=5.0)
        assert err.verdict is Verdict.REJECT and "answered 400: xxxx" in str(err)
        assert seconds < 5 and peer.closed.wait(5)  # it hung up; the peer did not stop on its own
        assert peer.sent["huge"] < give_up // 4  # it hung up long before the peer would stop
        assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss0 < 64 * 1024  # KiB


@pytest.mark.parametrize("mode", ["trickle-body", "trickle-headers"])
def test_a_trickled_answer_ends_at_the_deadline(peer, mode):
    err, seconds = send(peer, mode, timeout=2.0)
    assert err.verdict is Verdict.RETRY and "no answer within 2 s" in str(err)
    assert seconds < 4.0


def test_a_compression_bomb_is_not_inflated(peer):
    from helpers.hostile_http import _bomb

    _bomb()  # made before the request, so the deadline measures the client only
    err, seconds = send(peer, "bomb")
    assert err.verdict is Verdict.REJECT and seconds < 4.0
    assert "compressed" in str(err)


def forms(text: str) -> list[str]:
    """Every piece of the secret path found in ``text``, in any encoding."""
    lowered = text.lower()
    return [p for p in PIECES if p.lower() in lowered or quote(p).lower() in lowered]


def test_a_body_quoting_the_secret_path_back_is_masked_before_it_is_cut(peer):
    err, _ = send(peer, "echo")
    assert err.verdict is Verdict.SLOW_RETRY and "answered 404: xxx" in str(err)
    assert forms(str(err)) == [], str(err)


def test_the_masked_text_is_what_the_dead_letters_the_log_and_status_get(
    peer, tmp_path, caplog, monkeypatch
):
    monkeypatch.setattr(backoff, "SLOW", backoff.Schedule(0.01, 0.01))
    store = Store(tmp_path / "state")
    store.commit("tracker", {}, [row(0)])
    sink = WebhookSink(peer.url("echo", SECRET), gone_after_seconds=1.0)
    pool = DeliveryPool([sink], store, tmp_path / "dead-letter.jsonl")
    store.register_sinks(pool.names)
    with caplog.at_level("INFO", logger="se_forwarder"):
        pool.start()
        try:
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline and store.depth("webhook") > 0:
                time.sleep(0.05)
            errors = [s.last_error or "" for s in pool.stats().values()]
        finally:
            pool.stop()
    assert store.depth("webhook") == 0, errors
    letters = (tmp_path / "dead-letter.jsonl").read_text()
    assert "undeliverable" in letters and "Cannot POST" in letters, letters
    logged = " ".join(json.dumps(getattr(r, "fields", {})) + r.getMessage() for r in caplog.records)
    assert forms(letters) == [], letters
    assert forms(logged) == [], logged
    assert forms(" ".join(errors)) == [], errors
