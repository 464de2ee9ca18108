"""The IMDS client's HTTP/1.1 reading against hostile answers: a loopback peer that writes
exactly the bytes a test gives it. What it accepts (lengths, chunks, interim answers, keep-alive
and close) and what it refuses (anything that is not a well-formed HTTP/1.1 answer, an answer
over the size bound, an answer that takes longer than the timeout in total); never an exception,
never a hang, never a body made up from a guess."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest

from se_forwarder.imds import wire as imds_wire
from se_forwarder.imds.client import ImdsClient, RateLimiter

DOC = b'{"DocumentIncarnation":1,"Events":[]}'
POLL = b"GET /metadata/scheduledevents?api-version=2020-07-01 HTTP/1.1"


class Peer:
    """Accepts connections; for each request read, writes the next scripted answer (a list of
    byte strings written ``gap`` seconds apart); ``close`` after an answer closes the
    connection. Records each request and the connection it came on."""

    def __init__(self) -> None:
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.answers: list[tuple[list[bytes], float, bool]] = []
        self.requests: list[tuple[int, bytes]] = []  # (connection number, request head)
        self.connections = 0
        self._stop = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def answer(self, *parts: bytes, gap: float = 0.0, close: bool = False) -> Peer:
        self.answers.append((list(parts), gap, close))
        return self

    def _accept(self) -> None:
        self.server.settimeout(0.1)
        while not self._stop.is_set():
            try:
                conn, _ = self.server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._serve, args=(conn, self.connections), daemon=True).start()

    def _serve(self, conn: socket.socket, number: int) -> None:
        with conn:
            data = b""
            while not self._stop.is_set():
                while b"\r\n\r\n" not in data:
                    try:
                        chunk = conn.recv(65536)
                    except OSError:
                        return
                    if not chunk:
                        return
                    data += chunk
                head, _, data = data.partition(b"\r\n\r\n")
                self.requests.append((number, head))
                if not self.answers:
                    return
                parts, gap, close = self.answers.pop(0)
                for part in parts:
                    try:
                        conn.sendall(part)
                    except OSError:
                        return
                    if gap:
                        time.sleep(gap)
                if close:
                    return

    def stop(self) -> None:
        self._stop.set()
        self.server.close()


@pytest.fixture
def peer() -> Iterator[Peer]:
    p = Peer()
    yield p
    p.stop()


def client(peer: Peer, timeout: float = 2.0) -> ImdsClient:
    # first_call_timeout = timeout: these tests are about reading answers, not the slow first call
    return ImdsClient(
        peer.url, timeout=timeout, first_call_timeout=timeout, limiter=RateLimiter(1000)
    )


def ok(body: bytes = DOC, *headers: bytes) -> bytes:
    return (
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
        + b"".join(h + b"\r\n" for h in headers)
        + b"Content-Length: %d\r\n\r\n" % len(body)
        + body
    )


def test_the_request_is_one_plain_get_with_the_metadata_header(peer):
    peer.answer(ok())
    answer = client(peer).scheduled_events()
    assert answer.ok and answer.body == DOC
    assert peer.requests[0][1] == (POLL + b"\r\nHost: 127.0.0.1:%d\r\nMetadata: true" % peer.port)


def test_keep_alive_one_connection_for_many_answers(peer):
    for _ in range(3):
        peer.answer(ok())
    c = client(peer)
    assert [c.scheduled_events().body for _ in range(3)] == [DOC] * 3
    assert {n for n, _ in peer.requests} == {1}


def test_an_answer_in_pieces_is_put_together(peer):
    raw = ok()
    peer.answer(*[raw[i : i + 7] for i in range(0, len(raw), 7)], gap=0.002)
    assert client(peer).scheduled_events().body == DOC


def test_chunked_with_extensions_and_trailers(peer):
    peer.answer(
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"a;name=value\r\n" + DOC[:10] + b"\r\n"
        b"%x\r\n" % (len(DOC) - 10) + DOC[10:] + b"\r\n0\r\nX-Trailer: 1\r\n\r\n"
    ).answer(ok())
    c = client(peer)
    assert c.scheduled_events().body == DOC
    assert c.scheduled_events().body == DOC  # the connection is still in step
    assert {n for n, _ in peer.requests} == {1}


def test_interim_answers_are_skipped(peer):
    peer.answer(
        b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </x>\r\n\r\n" + ok()
    )
    assert client(peer).scheduled_events().body == DOC


@pytest.mark.parametrize(
    "answer",
    [
        b"HTTP/1.0 200 OK\r\n\r\n" + DOC,  # no length: the body ends with the connection
        b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n" + DOC,
    ],
)
def test_a_body_that_ends_with_the_connection_then_a_new_connection(peer, answer):
    peer.answer(answer, close=True).answer(ok())
    c = client(peer)
    assert c.scheduled_events().body == DOC
    assert c.scheduled_events().body == DOC
    assert [n for n, _ in peer.requests] == [1, 2]


def test_connection_close_with_a_length_is_honoured(peer):
    peer.answer(ok(DOC, b"Connection: close")).answer(ok())
    c = client(peer)
    assert c.scheduled_events().ok and c.scheduled_events().ok
    assert [n for n, _ in peer.requests] == [1, 2]


def test_no_body_for_204_and_an_error_status_is_an_answer(peer):
    peer.answer(b"HTTP/1.1 204 No Content\r\n\r\n")
    peer.answer(b"HTTP/1.1 503 Busy\r\nContent-Length: 4\r\n\r\nbusy")
    c = client(peer)
    first = c.scheduled_events()
    assert first.status == 204 and first.body == b""
    second = c.scheduled_events()
    assert second.status == 503 and second.describe() == "HTTP 503: busy"


@pytest.mark.parametrize(
    "raw,reason",
    [
        (b"HTTP/2 200 OK\r\n\r\n", "bad answer: status line"),
        (b"ICY 200 OK\r\n\r\n", "bad answer: status line"),
        (b"HTTP/1.1 2000 OK\r\n\r\n", "bad answer: status line"),
        (b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n", "bad answer: header"),
        (b"HTTP/1.1 200 OK\r\nX: a\r\n folded\r\n\r\n", "bad answer: header"),
        (b"HTTP/1.1 200 OK\r\nBad Name: x\r\n\r\n", "bad answer: header"),
        (b"HTTP/1.1 200 OK\r\nX: a\x00b\r\n\r\n", "bad answer: header"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", "bad answer: Content-Length"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 1e3\r\n\r\n", "bad answer: Content-Length"),
        (
            b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd",
            "bad answer: conflicting body lengths",
        ),
        (
            b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n"
            b"3\r\nabc\r\n0\r\n\r\n",
            "bad answer: conflicting body lengths",
        ),
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
            "bad answer: Transfer-Encoding",
        ),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", "bad answer: chunk size"),
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabc\r\n0\r\n\r\n",
            "bad answer: chunk longer than its size",
        ),
        (b"HTTP/1.1 101 Switching Protocols\r\n\r\n" * 9, "bad answer: too many interim answers"),
        (
            b"HTTP/1.1 200 OK\r\nX: " + b"a" * (70 * 1024) + b"\r\n\r\n",
            "bad answer: headers too large",
        ),
    ],
)
def test_what_is_not_well_formed_http_is_refused(peer, raw, reason):
    peer.answer(raw, close=True).answer(ok())
    c = client(peer)
    answer = c.scheduled_events()
    assert answer.status is None and answer.error is not None
    assert answer.error.startswith(reason), answer.error
    assert c.scheduled_events().body == DOC  # a new connection, and it works


DATE = b"Date: Sat, 28 Nov 2026 17:50:0%d GMT"


@pytest.mark.parametrize(
    "last,reason",
    [
        (ok(DOC, DATE % 2 + b"\x00"), "bad answer: header"),
        (ok(DOC, DATE % 2, b"Content-Length: 99"), "bad answer: conflicting body lengths"),
        (ok(DOC, DATE % 2, b"Connection: close"), None),
    ],
)
def test_a_head_that_differs_from_the_last_in_more_than_its_date_is_read_again(peer, last, reason):
    """The framing of an unchanged document's head is remembered, Date aside; a changed head,
    or a Date line that is not a well-formed field, is read and checked again."""
    peer.answer(ok(DOC, DATE % 0)).answer(ok(DOC, DATE % 1)).answer(last).answer(ok())
    c = client(peer)
    assert [c.scheduled_events().body for _ in range(2)] == [DOC, DOC]
    answer = c.scheduled_events()
    if reason is None:
        assert answer.body == DOC
        assert c.scheduled_events().body == DOC  # on a new connection: that one said close
        assert [n for n, _ in peer.requests] == [1, 1, 1, 2]
    else:
        assert answer.error is not None and answer.error.startswith(reason), answer.error


def test_closed_before_or_in_the_middle_of_the_answer(peer):
    peer.answer(b"", close=True).answer(ok()[:-5], close=True).answer(ok())
    c = client(peer)
    assert c.scheduled_events().error == "connection closed without an answer"
    assert c.scheduled_events().error == "connection closed in the middle of the answer"
    assert c.scheduled_events().ok


def test_bytes_after_the_answer_are_not_taken_for_the_next_one(peer):
    peer.answer(ok() + ok(b'{"forged":1}')).answer(ok())
    c = client(peer)
    assert c.scheduled_events().body == DOC
    assert c.scheduled_events().body == DOC  # asked again, on a new connection
    assert [n for n, _ in peer.requests] == [1, 2]


def test_a_declared_length_over_the_bound_fails_before_the_body(peer, monkeypatch):
    monkeypatch.setattr(imds_wire, "MAX_ANSWER_BYTES", 1000)
    peer.answer(b"HTTP/1.1 200 OK\r\nContent-Length: 1001\r\n\r\n")  # and nothing more
    t0 = time.monotonic()
    answer = client(peer).scheduled_events()
    assert answer.error == "answer too large: 1001 bytes (at most 1000)"
    assert time.monotonic() - t0 < 1.0


@pytest.mark.parametrize(
    "raw",
    [
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
        + (b"100\r\n" + b"x" * 256 + b"\r\n") * 5,
        b"HTTP/1.0 200 OK\r\n\r\n" + b"x" * 2000,
    ],
)
def test_a_body_over_the_bound_is_refused_whatever_its_framing(peer, monkeypatch, raw):
    monkeypatch.setattr(imds_wire, "MAX_ANSWER_BYTES", 1000)
    peer.answer(raw, close=True)
    answer = client(peer).scheduled_events()
    assert answer.error is not None and answer.error.startswith("answer too large"), answer.error


def test_the_timeout_bounds_the_whole_answer_not_each_read(peer):
    """A peer that drips a byte every 50 ms never lets one read wait 0.5 s: the deadline is for
    the whole request."""
    raw = ok()
    peer.answer(*[raw[i : i + 1] for i in range(len(raw))], gap=0.05)
    t0 = time.monotonic()
    answer = client(peer, timeout=0.5).scheduled_events()
    elapsed = time.monotonic() - t0
    assert answer.error == "timeout after 0.5 s"
    assert 0.45 <= elapsed < 1.5, elapsed


def test_the_instance_document_and_an_approval_on_the_same_wire(peer):
    peer.answer(ok(b'{"compute":{"name":"vm"}}')).answer(
        b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"
    )
    c = client(peer)
    assert c.instance() == {"compute": {"name": "vm"}}
    assert c.approve(["e1"]).status == 200
    post = peer.requests[1][1]
    assert post.startswith(b"POST /metadata/scheduledevents?api-version=2020-07-01 HTTP/1.1\r\n")
    assert b"\r\nMetadata: true\r\n" in post and post.endswith(b"\r\nContent-Length: 38")


def test_a_path_that_could_end_the_request_line_is_refused():
    c = ImdsClient("http://127.0.0.1:9")
    with pytest.raises(ValueError):
        c.instance(api_version="2021-02-01 HTTP/1.1\r\nX-Forwarded-For: 1.2.3.4\r\n\r\n")
