"""The fuzz lane: property-based tests (Hypothesis) over what a peer or a file hands the agent
and the report, with the time and the memory of each example bounded. Deselected unless
``-m fuzz`` (``.ci/run`` names the lane in its run of the suite): its examples take a minute or
two.

- the IMDS document, as bytes off the wire: ``parse_body`` answers a ``Document`` or one
  ``BadDocument`` for anything (nesting past the recursion limit, numbers past 64 bits, lone
  surrogates, a BOM), and the recorder takes any answer without raising;
- the report's line reader: ``sample`` (the tables a file's first lines hold) takes any lines
  (not JSON, not UTF-8, nested past the recursion limit, huge) without raising.
"""

from __future__ import annotations

import json
import time
import tracemalloc
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from se_forwarder.errors import BadDocument
from se_forwarder.imds.parse import parse_body
from se_forwarder.model import VmIdentity
from se_forwarder.outbox import Store
from se_forwarder.recording.recorder import Recorder
from se_forwarder.report.kql.tables import sample

pytestmark = pytest.mark.fuzz

SECONDS = 2.0  # each example, however hostile, within this much CPU time of this process
MEMORY = 64 * 1024 * 1024  # and this much Python memory at its peak

LANE = settings(
    max_examples=500,
    deadline=None,  # measured below, with the memory, not by Hypothesis's timer
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)

SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**80), max_value=2**80),
    st.floats(allow_nan=False),
    st.text(max_size=40),
)
JSON = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=5), st.dictionaries(st.text(max_size=12), inner, max_size=5)
    ),
    max_leaves=30,
)
EVENT = st.fixed_dictionaries(
    {
        "EventId": st.one_of(st.text(max_size=40), SCALARS),
        "EventType": st.sampled_from(["Reboot", "Redeploy", "Freeze", "Preempt", "Terminate", ""]),
        "EventStatus": st.sampled_from(["Scheduled", "Started", "Completed", "Canceled", "x"]),
    },
    optional={
        "Resources": st.one_of(st.lists(st.text(max_size=20), max_size=5), JSON),
        "NotBefore": st.one_of(st.text(max_size=40), SCALARS),
        "Description": st.text(max_size=200),
        "DurationInSeconds": SCALARS,
        "EventSource": st.sampled_from(["Platform", "User", None, 3]),
    },
)
DOCUMENT = st.fixed_dictionaries(
    {},
    optional={
        "DocumentIncarnation": st.one_of(st.integers(min_value=-(2**70), max_value=2**70), JSON),
        "Events": st.one_of(st.lists(st.one_of(EVENT, JSON), max_size=6), JSON),
    },
)


def nested(depth: int, opener: str = "[") -> bytes:
    return (opener * depth).encode()


HOSTILE = st.one_of(
    st.builds(lambda d: json.dumps(d).encode(), DOCUMENT),
    st.builds(lambda d: json.dumps(d, ensure_ascii=False).encode("utf-8", "surrogatepass"), JSON),
    st.binary(max_size=300),
    st.integers(min_value=1_000, max_value=200_000).map(nested),
    st.builds(
        lambda d, n: json.dumps(d).encode().replace(b"[]", b"[" * n + b"]" * n, 1),
        DOCUMENT,
        st.integers(min_value=1, max_value=50_000),
    ),
)


@contextmanager
def bounded() -> Iterator[None]:
    """The example's CPU time and peak Python memory, asserted when it ends: what the parse
    controls, not how busy the machine is (the lane runs beside the suite's other workers)."""
    tracemalloc.start()
    started = time.process_time()
    try:
        yield
    finally:
        took = time.process_time() - started
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    assert took <= SECONDS, f"{took:.2f} s"
    assert peak <= MEMORY, f"{peak / 2**20:.1f} MiB"


def document_or_refusal(parse: Callable[[bytes], Any], body: bytes) -> None:
    refusal = ""
    try:
        parse(body)
    except BadDocument as exc:
        refusal = str(exc) or "(empty)"
    assert "\n" not in refusal and refusal != "(empty)"


@LANE
@given(HOSTILE)
@example(nested(100_000))
@example(b"\xef\xbb\xbf" + json.dumps({"DocumentIncarnation": 1, "Events": []}).encode())
@example(b'{"DocumentIncarnation": 1, "Events": [{"EventId": "\\ud800"}]}')
@example(b'{"DocumentIncarnation": 1' + b"9" * 5000 + b', "Events": []}')
def test_the_imds_document_is_a_document_or_one_refusal(body):
    with bounded():
        document_or_refusal(parse_body, body)


@pytest.fixture(scope="module")
def recorder(tmp_path_factory):
    store = Store(tmp_path_factory.mktemp("fuzz"), durable=False)
    yield Recorder(store, VmIdentity(VmName="vm0"))
    store.close()


@LANE
@given(status=st.sampled_from([200, 200, 200, 500, 410]), body=HOSTILE)
@example(status=200, body=nested(100_000))
def test_the_recorder_takes_any_answer(recorder, status, body):
    at = (recorder.stats.last_ok_ms or 1_700_000_000_000) + 1000
    with bounded():
        recorder.answer(at, status, body)
    assert recorder.stats.polls > 0


LINE = st.one_of(
    st.builds(json.dumps, JSON),
    st.builds(lambda d: json.dumps({"stream": "Custom-ScheduledEvents", "record": d}), JSON),
    st.builds(lambda d: json.dumps(dict(d, Phase="FirstSeen")), st.dictionaries(st.text(), JSON)),
    st.text(max_size=200),
    st.integers(min_value=1_000, max_value=60_000).map(lambda n: "[" * n),
)


@LANE
@given(lines=st.lists(LINE, max_size=20), raw=st.binary(max_size=200))
@example(lines=["[" * 50_000, json.dumps({"Phase": "FirstSeen"})], raw=b"")
def test_the_reports_line_reader_takes_any_line(tmp_path_factory, lines, raw):
    path = tmp_path_factory.mktemp("lines") / "records.jsonl"
    path.write_bytes("\n".join(lines).encode("utf-8", "surrogatepass") + b"\n" + raw)
    with bounded():
        wrapped, tables = sample(path)
    assert isinstance(wrapped, bool) and tables <= {"records", "heartbeats", "platform"}
