"""The document at the edge (scheduled-events-api.md "The document"): parsing, old api-versions,
NotBefore formats, and fuzzing (any input is a Document or a BadDocument, never a crash)."""

from __future__ import annotations

import json
import string

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from se_forwarder.errors import BadDocument
from se_forwarder.imds.parse import parse_body, parse_json
from se_forwarder.model import Document, LifecycleRecord, VmIdentity
from se_forwarder.outbox import Store
from se_forwarder.recording.recorder import Recorder
from se_forwarder.timefmt import format_ms, parse_iso_ms, parse_not_before_ms

SEED = {
    "DocumentIncarnation": 2,
    "Events": [
        {
            "EventId": "C7061BAC-AFDC-4513-B24B-AA5F13A16123",
            "EventStatus": "Scheduled",
            "EventType": "Freeze",
            "ResourceType": "VirtualMachine",
            "Resources": ["WestNO_0", "WestNO_1"],
            "NotBefore": "Mon, 11 Apr 2022 22:26:58 GMT",
            "Description": (
                "Virtual machine is being paused because of a memory-preserving Live Migration "
                "operation."
            ),
            "EventSource": "Platform",
            "DurationInSeconds": 5,
        }
    ],
}
NB_MS = parse_iso_ms("2022-04-11T22:26:58Z")


def with_event(**changes):
    d = json.loads(json.dumps(SEED))
    for k, v in changes.items():
        if v is ...:
            del d["Events"][0][k]
        else:
            d["Events"][0][k] = v
    return d


def test_the_seed_document():
    d = parse_body(json.dumps(SEED).encode())
    assert d.incarnation == 2
    (e,) = d.events
    assert (e.event_id, e.event_type, e.status, e.resource_type) == (
        "C7061BAC-AFDC-4513-B24B-AA5F13A16123",
        "Freeze",
        "Scheduled",
        "VirtualMachine",
    )
    assert e.resources == ("WestNO_0", "WestNO_1")
    assert (e.source, e.duration, e.not_before_raw, e.not_before_ms) == (
        "Platform",
        5,
        "Mon, 11 Apr 2022 22:26:58 GMT",
        NB_MS,
    )
    assert parse_body(json.dumps(SEED)) == d == parse_json(SEED)


def test_empty_events_means_nothing_scheduled():
    assert parse_json({"DocumentIncarnation": 1, "Events": []}) == Document(1, ())


@pytest.mark.parametrize("value,expected", [(5, 5), ("5", 5), (" 7 ", 7), ("-3", -3), (0, 0)])
def test_incarnation_number_or_numeric_string(value, expected):
    assert parse_json({"DocumentIncarnation": value, "Events": []}).incarnation == expected


@pytest.mark.parametrize("value", [True, False, 2.0, "two", "", "-", "1.5", None, [], {}])
def test_incarnation_that_is_not_an_integer(value):
    with pytest.raises(BadDocument):
        parse_json({"DocumentIncarnation": value, "Events": []})


def test_old_api_versions_missing_fields_are_none():
    d = parse_json(
        with_event(
            DurationInSeconds=..., EventSource=..., Description=..., ResourceType=..., Resources=...
        )
    )
    (e,) = d.events
    assert (e.duration, e.source, e.description, e.resource_type, e.resources) == (
        None,
        None,
        None,
        None,
        (),
    )


@pytest.mark.parametrize(
    "text",
    [
        "Mon, 11 Apr 2022 22:26:58 GMT",  # RFC 1123 (current api-versions)
        "2022-04-11T22:26:58Z",  # ISO 8601 (2017 preview)
        "2022-04-11T22:26:58",  # naive ISO: UTC
        "2022-04-12T00:26:58+02:00",  # offset
        "Mon, 11 Apr 2022 23:26:58 +0100",
    ],
)
def test_not_before_formats(text):
    assert parse_json(with_event(NotBefore=text)).events[0].not_before_ms == NB_MS


@pytest.mark.parametrize("text", ["", "   "])
def test_empty_not_before_once_started(text):
    (e,) = parse_json(with_event(NotBefore=text, EventStatus="Started")).events
    assert e.not_before_ms is None and e.not_before_raw == text


@pytest.mark.parametrize(
    "text",
    [
        "soon",
        "Mon, 99 Foo 2022",
        "2022-13-45T00:00:00Z",
        "9999-12-31T23:59:59-05:00",  # after year 9999 in UTC: not writable as a column
        "0001-01-01T00:00:00+01:00",  # before year 1 in UTC
        "Fri, 31 Dec 9999 23:59:59 -2359",
    ],
)
def test_unusable_not_before_is_kept_raw_not_fatal(text):
    (e,) = parse_json(with_event(NotBefore=text)).events
    assert e.not_before_ms is None and e.not_before_raw == text


def test_format_ms_is_the_contract_datetime_at_both_ends_of_the_range():
    assert format_ms(NB_MS + 7) == "2022-04-11T22:26:58.007Z"
    assert format_ms(parse_iso_ms("0001-01-01T00:00:00Z")) == "0001-01-01T00:00:00.000Z"
    assert format_ms(parse_iso_ms("9999-12-31T23:59:59.999Z")) == "9999-12-31T23:59:59.999Z"
    assert format_ms(-1) == "1969-12-31T23:59:59.999Z"
    assert format_ms(None) is None
    assert parse_not_before_ms("") is None


@pytest.mark.parametrize(
    "bad",
    [
        {"Events": []},
        {"DocumentIncarnation": 1},
        {"DocumentIncarnation": 1, "Events": None},
        {"DocumentIncarnation": 1, "Events": {"EventId": "x"}},
        [],
        "document",
        None,
    ],
)
def test_wrong_shapes_at_the_top_level_are_bad_documents(bad):
    with pytest.raises(BadDocument) as info:
        parse_json(bad)
    assert "\n" not in str(info.value) and str(info.value)


EID = SEED["Events"][0]["EventId"]
OTHER = {**SEED["Events"][0], "EventId": "0b8b3c8e-7777-4a4a-9c9c-0000000000ff"}


@pytest.mark.parametrize(
    "bad,where",
    [
        (with_event(EventType=...), "EventType"),
        (with_event(EventStatus=None), "EventStatus"),
        (with_event(DurationInSeconds="5"), "DurationInSeconds"),
        (with_event(DurationInSeconds=5.5), "DurationInSeconds"),
        (with_event(DurationInSeconds=True), "DurationInSeconds"),
        (with_event(Resources="WestNO_0"), "Resources"),
        (with_event(Resources=None), "Resources"),
        (with_event(Resources=[1]), "Resources"),
        (with_event(NotBefore=0), "NotBefore"),
    ],
)
def test_a_malformed_event_is_held_and_the_others_are_read(bad, where):
    """record-contract §1: one bad event never blinds the agent to the others."""
    bad["Events"].append(OTHER)
    doc = parse_json(bad)
    assert [e.event_id for e in doc.events] == [OTHER["EventId"]]
    assert doc.held == (EID,) and doc.complete
    [problem] = doc.problems
    assert problem.event_id == EID and problem.kind == "malformed" and where in problem.reason


@pytest.mark.parametrize(
    "event",
    [{"EventType": "Freeze"}, "x", 5, {"EventId": ""}, {"EventId": 5, "EventType": "Freeze"}],
)
def test_an_event_without_a_usable_event_id_makes_the_document_remove_nothing(event):
    doc = parse_json({"DocumentIncarnation": 1, "Events": [event, OTHER]})
    assert [e.event_id for e in doc.events] == [OTHER["EventId"]] and doc.held == ()
    assert not doc.complete and doc.problems[0].event_id is None


def test_a_repeated_event_id_counts_once_the_first_occurrence():
    changed = {**SEED["Events"][0], "EventType": "Reboot"}
    doc = parse_json({"DocumentIncarnation": 1, "Events": [SEED["Events"][0], changed]})
    assert [(e.event_id, e.event_type) for e in doc.events] == [(EID, "Freeze")]
    assert [(p.event_id, p.kind) for p in doc.problems] == [(EID, "repeated")] and doc.complete


def test_text_that_is_not_utf8_is_kept_with_replacement_characters():
    doc = parse_body(
        json.dumps(with_event(Description="disk \ud800 full", EventId=EID + "\udfff")).encode()
    )
    (e,) = doc.events
    assert e.description == "disk \ufffd full" and e.event_id == EID + "\ufffd"
    json.dumps(e.description, ensure_ascii=False).encode("utf-8")  # storable


def test_a_huge_value_is_cut_to_the_limit_and_counted():
    from se_forwarder.imds.parse import MAX_VALUE_BYTES

    doc = parse_json(with_event(Description="é" * 10_000_000))
    (e,) = doc.events
    assert len(e.description.encode("utf-8")) <= MAX_VALUE_BYTES and "truncated" in e.description
    assert doc.truncated == 1


@pytest.mark.parametrize(
    "body",
    [
        b"",
        "",
        b"  \n",
        "{",
        b"\xff\xfe\x00",
        "null",
        "[]",
        "1e999",
        b"[" * 100_000,
        '{"DocumentIncarnation": 1, "Events": []',
        None,
        5,
    ],
)
def test_bad_bodies(body):
    with pytest.raises(BadDocument):
        parse_body(body)


def test_unknown_fields_are_ignored():
    d = json.loads(json.dumps(SEED))
    d["Future"] = {"x": 1}
    d["Events"][0]["Priority"] = [1, 2]
    assert parse_json(d) == parse_json(SEED)


# -- fuzz -------------------------------------------------------------------------------------

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda kids: (
        st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=8), kids, max_size=4)
    ),
    max_leaves=20,
)

FIELD_VALUES = st.one_of(
    JSON,
    st.sampled_from(
        [
            "",
            "Started",
            "Scheduled",
            "Mon, 11 Apr 2022 22:26:58 GMT",
            "9999-12-31T23:59:59-05:00",
            "0001-01-01T00:00:00+01:00",
            "2022-04-11T22:26:58Z",
            "٣",
            "1" * 5000,
            "-0",
            "²",
        ]
    ),
    st.text(alphabet=string.digits + "-:TZ+. ", max_size=30),
)
EVENT_KEYS = [
    "EventId",
    "EventType",
    "EventStatus",
    "ResourceType",
    "Resources",
    "NotBefore",
    "Description",
    "EventSource",
    "DurationInSeconds",
    "Other",
]
EVENTLIKE = st.dictionaries(st.sampled_from(EVENT_KEYS), FIELD_VALUES, max_size=10)
VALID_EVENT = st.fixed_dictionaries(
    {
        "EventId": st.text(min_size=1, max_size=5),
        "EventType": st.text(max_size=5),
        "EventStatus": st.sampled_from(["Scheduled", "Started", "Other"]),
    },
    optional=dict.fromkeys(EVENT_KEYS[3:], FIELD_VALUES),
)
DOCLIKE = st.fixed_dictionaries(
    {},
    optional={
        "DocumentIncarnation": FIELD_VALUES,
        "Events": st.lists(st.one_of(EVENTLIKE, VALID_EVENT, JSON), max_size=4),
    },
)
ANY_INPUT = st.one_of(JSON, DOCLIKE)

FUZZ = settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


def _document_or_bad(fn, value):
    try:
        d = fn(value)
    except BadDocument as exc:
        problem = str(exc)
    else:
        assert isinstance(d, Document)
        return d
    assert problem  # a refused document names its problem
    return None


@FUZZ
@given(ANY_INPUT)
def test_fuzz_parse_json(value):
    d = _document_or_bad(parse_json, value)
    if d is not None:  # what passes is usable: ids unique, times writable
        assert len({e.event_id for e in d.events}) == len(d.events)
        for e in d.events:
            format_ms(e.not_before_ms)


@FUZZ
@given(ANY_INPUT)
def test_fuzz_parse_body_from_json_text(value):
    text = json.dumps(value)
    assert _document_or_bad(parse_body, text) == _document_or_bad(parse_body, text.encode())


@FUZZ
@given(st.binary(max_size=200))
@example(b"\xef\xbb\xbf{}")
@example(b'{"DocumentIncarnation": 1, "Events": [{"EventId": "\\ud800"}]}')
def test_fuzz_parse_body_bytes(data):
    _document_or_bad(parse_body, data)


@pytest.fixture(scope="module")
def recorder(tmp_path_factory):
    store = Store(tmp_path_factory.mktemp("fuzz"), durable=False)
    yield Recorder(store, VmIdentity(VmName="vm0"))
    store.close()


@FUZZ
@example(
    status=200, value=with_event(NotBefore="9999-12-31T23:59:59-05:00"), as_bytes=False, raw=None
)
@example(status=200, value=None, as_bytes=False, raw=b"[" * 100_000)
@given(
    status=st.sampled_from([200, 200, 200, 500, 429, 410]),
    value=st.one_of(DOCLIKE, JSON, st.just(SEED)),
    as_bytes=st.booleans(),
    raw=st.one_of(st.none(), st.binary(max_size=50)),
)
def test_fuzz_recorder_answer_never_raises(recorder, status, value, as_bytes, raw):
    at = (recorder.stats.last_ok_ms or 1_700_000_000_000) + 1000
    if raw is not None:
        out = recorder.answer(at, status, raw)
    elif as_bytes:
        out = recorder.answer(at, status, json.dumps(value).encode())
    else:
        out = recorder.answer(at, status, value, parsed=True)
    for r in out:
        assert isinstance(r, LifecycleRecord)
        json.loads(r.to_json())


def test_a_lone_surrogate_never_stops_a_commit(tmp_path):
    """record-contract §1: a valid JSON escape that is not valid UTF-8 is stored with U+FFFD."""
    from se_forwarder.outbox import Store as _Store

    body = json.dumps(with_event(Description="bad \ud800 text")).encode()  # "\\ud800" escaped
    assert b"\\ud800" in body
    store = _Store(tmp_path / "s")
    rec = Recorder(store, VmIdentity(VmName="WestNO_0"))
    try:
        records = rec.answer(1_700_000_000_000, 200, body)
        assert [r.Phase for r in records] == ["FirstSeen"]
        [row] = store.fetch("x", 10, after=0)
        assert "bad \ufffd text" in row.payload
    finally:
        store.close()
