"""The IMDS simulator, held to the real service's rules over real HTTP on loopback."""

from __future__ import annotations

import json
import math
import os
import re
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

import httpx
import pytest
from helpers import SHARED

from se_forwarder.errors import TraceError
from se_forwarder_testbed.simulator import (
    SCHEDULED_EVENTS_VERSIONS,
    RateLimiter,
    Scenario,
    ScenarioError,
    Simulator,
    builtin_names,
    command,
    load_scenario,
    load_trace,
    parse_scenario,
)
from se_forwarder_testbed.standins.tokens import MONITOR_AUDIENCE, InvalidToken, TokenAuthority

pytestmark = pytest.mark.e2e

H = {"Metadata": "true"}
SE = "/metadata/scheduledevents"
V = "2020-07-01"
SHARED_TRACES = SHARED / "traces"
RFC1123 = re.compile(
    r"^(Mon|Tue|Wed|Thu|Fri|Sat|Sun), \d\d (Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|"
    r"Oct|Nov|Dec) \d{4} \d\d:\d\d:\d\d GMT$"
)
ALL_FIELDS = {
    "EventId",
    "EventStatus",
    "EventType",
    "ResourceType",
    "Resources",
    "NotBefore",
    "Description",
    "EventSource",
    "DurationInSeconds",
}


def client(sim: Simulator, timeout: float = 5.0) -> httpx.Client:
    return httpx.Client(base_url=sim.url, trust_env=False, timeout=timeout)


def get_doc(c: httpx.Client, version: str = V) -> dict:
    r = c.get(SE, params={"api-version": version}, headers=H)
    assert r.status_code == 200, r.text
    return r.json()


def one_event(**over) -> dict:
    ev = {
        "EventId": "f020ba2e-3bc0-4c40-a10b-86575a9eabd5",
        "EventType": "Reboot",
        "EventStatus": "Scheduled",
        "Resources": ["vm_0", "vm_1"],
        "NotBefore": "Mon, 11 Apr 2022 22:26:58 GMT",
        "Description": "Host maintenance.",
        "EventSource": "User",
        "DurationInSeconds": 9,
    }
    ev.update(over)
    return ev


def scenario(**data) -> Scenario:
    return parse_scenario(data, "<test>")


@pytest.fixture
def sim():
    """A hand-driven simulator without the throttle (tests that need it build their own)."""
    with Simulator(rate_limit=None) as s:
        yield s


# ---------------------------------------------------------------------------------------------
# Request rules


def test_metadata_header_is_required_and_must_be_exactly_true(sim):
    with client(sim) as c:
        for headers in (
            {},
            {"Metadata": "false"},
            {"Metadata": "True"},
            {"Metadata": "1"},
            {"Metadata": ""},
        ):
            for path, params in (
                (SE, {"api-version": V}),
                ("/metadata/instance", {"api-version": "2021-02-01"}),
            ):
                r = c.get(path, params=params, headers=headers)
                assert r.status_code == 400, (path, headers)
                assert "metadata header" in r.json()["error"].lower()
        r = c.post(SE, params={"api-version": V}, json={"StartRequests": []})
        assert r.status_code == 400
        assert c.get(SE, params={"api-version": V}, headers=H).status_code == 200


def test_api_version_missing_unknown_or_latest_is_refused(sim):
    with client(sim) as c:
        for params in (
            {},
            {"api-version": ""},
            {"api-version": "{latest}"},
            {"api-version": "2021-02-01"},
            {"api-version": "2020-07-02"},
        ):
            r = c.get(SE, params=params, headers=H)
            assert r.status_code == 400, params
            assert "api-version" in r.json()["error"]
        for version in (
            "2020-07-01",
            "2019-08-01",
            "2019-04-01",
            "2019-01-01",
            "2017-11-01",
            "2017-08-01",
            "2017-03-01",
        ):
            assert c.get(SE, params={"api-version": version}, headers=H).status_code == 200
        assert set(SCHEDULED_EVENTS_VERSIONS) == {
            "2020-07-01",
            "2019-08-01",
            "2019-04-01",
            "2019-01-01",
            "2017-11-01",
            "2017-08-01",
            "2017-03-01",
        }


def test_x_forwarded_for_is_refused_on_every_path(sim):
    with client(sim) as c:
        xff = dict(H, **{"X-Forwarded-For": "10.0.0.9"})
        assert c.get(SE, params={"api-version": V}, headers=xff).status_code == 400
        assert (
            c.get(
                "/metadata/instance", params={"api-version": "2021-02-01"}, headers=xff
            ).status_code
            == 400
        )
        assert (
            c.get(
                "/metadata/identity/oauth2/token",
                params={"api-version": "2018-02-01", "resource": MONITOR_AUDIENCE},
                headers=xff,
            ).status_code
            == 400
        )
        assert c.get(SE, params={"api-version": V}, headers=H).status_code == 200


def test_unknown_path_404_and_wrong_method_405(sim):
    with client(sim) as c:
        for path in ("/metadata/scheduledevent", "/metadata/foo", "/", "/metadata/instance/nope"):
            assert (
                c.get(path, params={"api-version": "2021-02-01"}, headers=H).status_code == 404
            ), path
        for method in ("PUT", "DELETE", "PATCH"):
            assert c.request(method, SE, params={"api-version": V}, headers=H).status_code == 405, (
                method
            )
        assert (
            c.post(
                "/metadata/instance", params={"api-version": "2021-02-01"}, headers=H
            ).status_code
            == 405
        )
        assert c.post("/metadata/identity/oauth2/token", headers=H).status_code == 405


def test_rate_limit_429_above_five_per_second_across_metadata_paths():
    with Simulator() as s, client(s) as c:
        inst = {"api-version": "2021-02-01"}
        statuses = [c.get(SE, params={"api-version": V}, headers=H).status_code for _ in range(3)]
        statuses += [
            c.get("/metadata/instance", params=inst, headers=H).status_code for _ in range(2)
        ]
        t_fifth = time.monotonic()
        assert statuses == [200] * 5
        assert c.get(SE, params={"api-version": V}, headers=H).status_code == 429
        assert c.get("/metadata/instance", params=inst, headers=H).status_code == 429
        # a refused request does not extend the block: one second after the first, room again
        time.sleep(max(0.0, t_fifth + 1.05 - time.monotonic()))
        assert c.get(SE, params={"api-version": V}, headers=H).status_code == 200
        assert [r.status for r in s.requests].count(429) == 2


def test_rate_limiter_sliding_window_exactly():
    # times in integer milliseconds (window=1000) so the boundaries are exact
    lim = RateLimiter(5, window=1000)
    assert all(lim.allow(i * 200) for i in range(50))  # a steady 5/s passes for ever
    assert lim.allow(49 * 200 + 1) is False  # one more inside that second is the sixth
    lim = RateLimiter(5, window=1000)
    assert [lim.allow(10 * i) for i in range(7)] == [True] * 5 + [False] * 2
    assert lim.allow(999) is False  # the first admitted one is still inside the window
    assert lim.allow(1000) is True  # ...and now it is out; refusals did not count
    assert lim.allow(1005) is False
    assert lim.allow(1010) is True


def test_steady_polling_below_the_limit_never_sees_429():
    with Simulator() as s, client(s) as c:
        t0 = time.monotonic()
        statuses = []
        for i in range(9):  # 4/s for 2 s: realistic scheduling jitter must not trip it
            time.sleep(max(0.0, t0 + i * 0.25 - time.monotonic()))
            statuses.append(c.get(SE, params={"api-version": V}, headers=H).status_code)
        assert statuses == [200] * 9


def test_keep_alive_one_connection_serves_many_polls(sim):
    with client(sim) as c:
        for _ in range(15):
            r = c.get(SE, params={"api-version": V}, headers=H)
            assert r.status_code == 200
            assert r.headers["content-length"] == str(len(r.content))
            assert r.http_version == "HTTP/1.1"
    ports = {r.client_port for r in sim.requests}
    assert len(sim.requests) == 15 and len(ports) == 1


def test_stop_is_prompt_with_an_idle_keep_alive_connection():
    s = Simulator().start()
    c = client(s)
    assert get_doc(c)["Events"] == []
    t0 = time.monotonic()
    s.stop()
    assert time.monotonic() - t0 < 2.0
    with pytest.raises(httpx.TransportError):
        c.get(SE, params={"api-version": V}, headers=H)
    c.close()


def test_request_log_records_method_path_headers_status(sim):
    with client(sim) as c:
        c.get(SE, params={"api-version": V}, headers={"Metadata": "true", "User-Agent": "probe/1"})
        c.get(SE, params={"api-version": V})
    first, second = sim.requests
    assert (first.method, first.status, second.status) == ("GET", 200, 400)
    assert first.path == f"{SE}?api-version={V}"
    assert first.headers["User-Agent"] == "probe/1" and "Metadata" not in second.headers
    assert first.at <= second.at


# ---------------------------------------------------------------------------------------------
# The document


def test_fields_depend_on_api_version(sim):
    sim.set_events([one_event()])
    with client(sim) as c:
        docs = {v: get_doc(c, v) for v in SCHEDULED_EVENTS_VERSIONS}
    keys = {v: set(d["Events"][0]) for v, d in docs.items()}
    assert keys["2020-07-01"] == ALL_FIELDS
    assert keys["2019-08-01"] == ALL_FIELDS - {"DurationInSeconds"}
    assert keys["2019-04-01"] == ALL_FIELDS - {"DurationInSeconds", "EventSource"}
    for v in ("2019-01-01", "2017-11-01", "2017-08-01", "2017-03-01"):
        assert keys[v] == ALL_FIELDS - {"DurationInSeconds", "EventSource", "Description"}, v
    for v in SCHEDULED_EVENTS_VERSIONS:
        ev = docs[v]["Events"][0]
        assert docs[v]["DocumentIncarnation"] == sim.incarnation
        if v == "2017-03-01":  # the preview: IaaS names with a leading underscore, ISO NotBefore
            assert ev["Resources"] == ["_vm_0", "_vm_1"]
            assert ev["NotBefore"] == "2022-04-11T22:26:58Z"
        else:
            assert ev["Resources"] == ["vm_0", "vm_1"]
            assert ev["NotBefore"] == "Mon, 11 Apr 2022 22:26:58 GMT"
    full = docs["2020-07-01"]["Events"][0]
    assert (full["DurationInSeconds"], full["EventSource"], full["Description"]) == (
        9,
        "User",
        "Host maintenance.",
    )


def test_not_before_is_rfc1123_on_the_real_clock_and_empty_once_started():
    sc = scenario(
        events=[
            {
                "id": "A",
                "type": "Freeze",
                "resources": ["$vm"],
                "appear": 0,
                "not_before": 151,
                "remove_after_start": 50,
            }
        ]
    )
    with Simulator(sc, speed=100, rate_limit=None) as s, client(s) as c:
        ev = get_doc(c)["Events"][0]
        assert RFC1123.match(ev["NotBefore"]), ev["NotBefore"]
        due = math.floor(s.wall_time_of(151))
        assert ev["NotBefore"] == datetime.fromtimestamp(due, UTC).strftime(
            "%a, %d %b %Y %H:%M:%S GMT"
        )
        assert abs(parsedate_to_datetime(ev["NotBefore"]).timestamp() - (time.time() + 1.51)) < 1.1
        s.wait_until(lambda x: x.events() and x.events()[0]["EventStatus"] == "Started", 15)
        started = get_doc(c)["Events"][0]
        assert (started["EventStatus"], started["NotBefore"]) == ("Started", "")
        # it did not start before its NotBefore
        change = next(
            ch for ch in s.changes if ch.events and ch.events[0]["EventStatus"] == "Started"
        )
        assert change.wall >= due


def test_incarnation_moves_only_when_the_event_array_changes(sim):
    with client(sim) as c:
        start = get_doc(c)["DocumentIncarnation"]
        assert [get_doc(c)["DocumentIncarnation"] for _ in range(3)] == [start] * 3
        assert sim.set_events([one_event()]) == start + 1
        assert sim.set_events([one_event()]) == start + 1  # same content: no new incarnation
        assert [get_doc(c)["DocumentIncarnation"] for _ in range(3)] == [start + 1] * 3
        assert sim.set_events([one_event(EventStatus="Started")]) == start + 2
        ev = get_doc(c)["Events"][0]
        assert ev["NotBefore"] == "" and ev["EventId"] == one_event()["EventId"]
        assert sim.set_events([]) == start + 3
        # a redeployed VM may see a lower counter: the test control can force it
        assert sim.set_events([one_event()], incarnation=1) == 1
        assert get_doc(c)["DocumentIncarnation"] == 1
    assert [ch.incarnation for ch in sim.changes] == [start, start + 1, start + 2, start + 3, 1]


def test_event_ids_are_stable_across_states_and_several_events_coexist():
    sc = load_scenario("availability-set")
    with Simulator(sc, speed=sc.end / 0.6, rate_limit=None) as s:
        assert s.wait_until_finished(15)
        changes = s.changes
    ids_by_type_resources: dict[tuple, set[str]] = {}
    for ch in changes:
        for e in ch.events:
            ids_by_type_resources.setdefault((e["EventType"], tuple(e["Resources"])), set()).add(
                e["EventId"]
            )
    assert len(ids_by_type_resources) == 4
    assert all(len(ids) == 1 for ids in ids_by_type_resources.values())
    assert max(len(ch.events) for ch in changes) >= 3
    assert any(len(e["Resources"]) > 1 for ch in changes for e in ch.events)
    assert len({next(iter(i)) for i in ids_by_type_resources.values()}) == 4


def test_document_equals_what_is_served_and_same_incarnation_means_same_content():
    sc = load_scenario("reschedule")
    seen: dict[int, list] = {}
    with Simulator(sc, speed=1200, rate_limit=None) as s, client(s) as c:
        while not s.finished:
            doc = get_doc(c)
            inc = doc["DocumentIncarnation"]
            assert seen.setdefault(inc, doc["Events"]) == doc["Events"]
        assert get_doc(c) == s.document()
        logged = {ch.incarnation: list(ch.events) for ch in s.changes}
    for inc, events in seen.items():
        assert logged[inc] == events


# ---------------------------------------------------------------------------------------------
# Approvals


def test_approval_answers_200_for_known_ids_and_400_for_malformed(sim):
    a = one_event()
    b = one_event(EventId="C7061BAC-AFDC-4513-B24B-AA5F13A16123")
    sim.set_events([a, b])
    url = f"{SE}?api-version={V}"
    with client(sim) as c:
        ok = {"StartRequests": [{"EventId": a["EventId"]}, {"EventId": b["EventId"]}]}
        assert c.post(url, headers=H, json=ok).status_code == 200
        assert c.post(url, headers=H, json=ok).status_code == 200  # already approved: still 200
        # the 2017 body carried the incarnation as a string
        assert (
            c.post(
                url,
                headers=H,
                json={
                    "DocumentIncarnation": "5",
                    "StartRequests": [{"EventId": b["EventId"].lower()}],
                },
            ).status_code
            == 200
        )
        bad_bodies = [
            b"not json",
            b"",
            b"[]",
            b'{"StartRequests": {}}',
            b'{"StartRequests": []}',
            b'{"StartRequests": [{"Id": "x"}]}',
            b'{"StartRequests": [{"EventId": 5}]}',
            b'{"Start": [{"EventId": "x"}]}',
            json.dumps({"StartRequests": [{"EventId": "unknown-id"}]}).encode(),
        ]
        for body in bad_bodies:
            assert c.post(url, headers=H, content=body).status_code == 400, body
        assert c.post(url, json=ok).status_code == 400  # no Metadata header
        assert c.post(url, headers={"Metadata": "yes"}, json=ok).status_code == 400
        assert c.post(SE, headers=H, json=ok).status_code == 400  # no api-version
    assert set(sim.approvals) == {a["EventId"], b["EventId"]}


def test_approved_user_reboot_starts_early_after_its_delay():
    with Simulator("user-reboot-approved", speed=100, rate_limit=None) as s, client(s) as c:
        assert s.wait_until(lambda x: x.events(), 5)
        ev = get_doc(c)["Events"][0]
        assert (ev["EventStatus"], ev["EventSource"], ev["EventType"]) == (
            "Scheduled",
            "User",
            "Reboot",
        )
        not_before = parsedate_to_datetime(ev["NotBefore"]).timestamp()
        t_approve = time.time()
        r = c.post(
            SE,
            params={"api-version": V},
            headers=H,
            json={"StartRequests": [{"EventId": ev["EventId"]}]},
        )
        assert r.status_code == 200
        assert s.wait_until(lambda x: x.events() and x.events()[0]["EventStatus"] == "Started", 5)
        started = get_doc(c)["Events"][0]
        assert started["EventId"] == ev["EventId"] and started["NotBefore"] == ""
        change = next(
            ch for ch in s.changes if ch.events and ch.events[0]["EventStatus"] == "Started"
        )
        # approval_delay is 10 scenario s = 0.1 real s at speed 100; NotBefore was ~9 s away
        assert 0.09 <= change.wall - t_approve < 1.0
        assert change.wall < not_before - 5


def test_unapproved_event_waits_for_not_before_and_an_ignored_approval_changes_nothing():
    sc = scenario(
        events=[
            {
                "id": "wait",
                "type": "Reboot",
                "resources": ["$vm"],
                "appear": 0,
                "not_before": 40,
                "remove_after_start": 10,
            },
            {
                "id": "deaf",
                "type": "Reboot",
                "resources": ["$vm"],
                "appear": 0,
                "not_before": 40,
                "start_on_approval": False,
                "remove_after_start": 10,
            },
        ]
    )
    with Simulator(sc, speed=100, rate_limit=None) as s, client(s) as c:
        r = c.post(
            SE, params={"api-version": V}, headers=H, json={"StartRequests": [{"EventId": "deaf"}]}
        )
        assert r.status_code == 200 and set(s.approvals) == {"deaf"}
        assert s.wait_until_finished(5)
    started_at: dict[str, float] = {}
    for ch in s.changes:
        for e in ch.events:
            if e["EventStatus"] == "Started":
                started_at.setdefault(e["EventId"], ch.scenario_time)
    assert started_at == {"wait": 40.0, "deaf": 40.0}


# ---------------------------------------------------------------------------------------------
# Faults


@pytest.mark.parametrize("kind", ["410", "429", "500", "503"])
def test_injected_status_faults(sim, kind):
    sim.inject(kind, count=2)
    with client(sim) as c:
        assert c.get(SE, params={"api-version": V}, headers=H).status_code == int(kind)
        assert c.get(SE, params={"api-version": V}, headers=H).status_code == int(kind)
        assert c.get(SE, params={"api-version": V}, headers=H).status_code == 200
    assert sim.pending_faults() == 0


def test_injected_body_faults(sim):
    sim.set_events([one_event()])
    sim.inject("empty")
    sim.inject("garbage")
    sim.inject("wrong_shape")
    with client(sim) as c:
        r = c.get(SE, params={"api-version": V}, headers=H)
        assert (r.status_code, r.content, r.headers["content-length"]) == (200, b"", "0")
        r = c.get(SE, params={"api-version": V}, headers=H)
        assert r.status_code == 200
        with pytest.raises(json.JSONDecodeError):
            json.loads(r.content)
        r = c.get(SE, params={"api-version": V}, headers=H)
        body = r.json()
        assert r.status_code == 200 and not (
            isinstance(body.get("DocumentIncarnation"), int)
            and isinstance(body.get("Events"), list)
        )
        assert get_doc(c)["Events"][0]["EventId"] == one_event()["EventId"]


def test_faults_touch_only_scheduled_events_gets(sim):
    sim.inject("500")
    with client(sim) as c:
        assert (
            c.get("/metadata/instance", params={"api-version": "2021-02-01"}, headers=H).status_code
            == 200
        )
        assert c.get(SE, params={"api-version": V}).status_code == 400  # invalid: no fault used
        assert sim.pending_faults() == 1
        assert c.get(SE, params={"api-version": V}, headers=H).status_code == 500


def test_drop_hang_and_slow_faults(sim):
    with client(sim, timeout=2.0) as c:
        sim.inject("drop")
        with pytest.raises(httpx.TransportError):
            c.get(SE, params={"api-version": V}, headers=H)
        assert c.get(SE, params={"api-version": V}, headers=H).status_code == 200
        sim.inject("hang", delay=1.0)
        t0 = time.monotonic()
        with pytest.raises(httpx.ReadTimeout):
            c.get(SE, params={"api-version": V}, headers=H, timeout=0.3)
        assert time.monotonic() - t0 < 0.9
        sim.inject("slow", delay=0.3)
        t0 = time.monotonic()
        assert c.get(SE, params={"api-version": V}, headers=H).status_code == 200
        assert time.monotonic() - t0 >= 0.3
    assert [r.status for r in sim.requests][:2] == [None, 200]


def test_slow_first_call_only_delays_the_first_answer():
    with Simulator(first_call_delay=0.4, rate_limit=None) as s, client(s) as c:
        t0 = time.monotonic()
        assert get_doc(c)["Events"] == []
        first = time.monotonic() - t0
        t0 = time.monotonic()
        get_doc(c)
        assert first >= 0.4 and time.monotonic() - t0 < 0.2
    with (
        Simulator(first_call_delay=0.4, rate_limit=None) as s,
        client(s, timeout=0.2) as c,
        pytest.raises(httpx.ReadTimeout),
    ):  # an agent with a short first timeout fails
        c.get(SE, params={"api-version": V}, headers=H)
    with Simulator(rate_limit=None) as s, client(s) as c:
        s.inject("slow_first_call", delay=0.3)
        t0 = time.monotonic()
        get_doc(c)
        assert time.monotonic() - t0 >= 0.3
        with pytest.raises(RuntimeError):
            s.inject("slow_first_call", delay=1)
    # from a scenario: scenario seconds divided by the speed
    assert Simulator(scenario(first_call_delay=120), speed=60).first_call_delay == 2.0
    assert Simulator().first_call_delay == 0


def test_scenario_faults_are_queued_at_their_time():
    sc = scenario(faults=[{"at": 0, "kind": "503"}, {"at": 30, "kind": "garbage", "count": 2}])
    with Simulator(sc, speed=100, rate_limit=None) as s, client(s) as c:
        assert c.get(SE, params={"api-version": V}, headers=H).status_code == 503
        assert c.get(SE, params={"api-version": V}, headers=H).status_code == 200
        time.sleep(0.35)
        bodies = [c.get(SE, params={"api-version": V}, headers=H).content for _ in range(3)]
        assert bodies[0] == bodies[1] and bodies[0].startswith(b"<html>")
        assert json.loads(bodies[2])["Events"] == []


def test_unknown_fault_kind_is_refused(sim):
    with pytest.raises(ValueError, match="unknown fault kind"):
        sim.inject("404")


# ---------------------------------------------------------------------------------------------
# Traces


def test_shared_trace_is_served_in_turn():
    path = SHARED_TRACES / "live-migration-freeze.jsonl"
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    bodies = [x["body"] for x in lines]
    with Simulator(trace=path, speed=1503, rate_limit=None) as s, client(s) as c:
        served = []
        while not s.finished:
            served.append(get_doc(c))
        served.append(get_doc(c))
        changes = s.changes
    assert all(doc in bodies for doc in served)
    incs = [d["DocumentIncarnation"] for d in served]
    assert incs == sorted(incs) and incs[-1] == 4 and 3 in incs
    assert [ch.incarnation for ch in changes] == [1, 2, 3, 4]
    assert [ch.scenario_time for ch in changes] == [0.0, 1.0, 903.0, 1503.0]


def test_trace_errors_text_and_agent_lines(tmp_path):
    ev = one_event()
    rows = [
        {
            "at": "2024-01-01T00:00:00Z",
            "status": 200,
            "body": {"DocumentIncarnation": 7, "Events": [ev]},
        },
        {"at": "2024-01-01T00:00:10Z", "error": "timeout"},
        {"at": "2024-01-01T00:00:20Z", "status": 500, "text": "Internal Server Error"},
        {"at": "2024-01-01T00:00:25Z", "agent": "stop"},
        {"at": "2024-01-01T00:00:27Z", "agent": "start"},
        {"at": "2024-01-01T00:00:30Z", "status": 200, "text": ""},
        {
            "at": "2024-01-01T00:00:40Z",
            "status": 200,
            "body": {"DocumentIncarnation": 8, "Events": []},
        },
    ]
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    assert [o.offset for o in load_trace(path)] == [0, 10, 20, 30, 40]
    with Simulator(trace=path, speed=20, rate_limit=None, hang_seconds=0.1) as s, client(s) as c:

        def at(offset: float) -> None:
            time.sleep(max(0.0, s.wall_time_of(offset) - time.time()))

        def get() -> httpx.Response:
            return c.get(SE, params={"api-version": V}, headers=H)

        at(2)
        assert get().json() == {"DocumentIncarnation": 7, "Events": [ev]}
        post = {"StartRequests": [{"EventId": ev["EventId"]}]}
        assert c.post(SE, params={"api-version": V}, headers=H, json=post).status_code == 200
        assert (
            c.post(
                SE,
                params={"api-version": V},
                headers=H,
                json={"StartRequests": [{"EventId": "nope"}]},
            ).status_code
            == 400
        )
        at(15)
        t0 = time.monotonic()
        with pytest.raises(httpx.TransportError):
            get()
        assert time.monotonic() - t0 >= 0.09
        at(25)
        r = get()
        assert (r.status_code, r.text) == (500, "Internal Server Error")
        at(35)
        r = get()
        assert (r.status_code, r.content) == (200, b"")
        at(45)
        assert get().json() == {"DocumentIncarnation": 8, "Events": []}
        assert s.finished
    assert [ch.incarnation for ch in s.changes] == [7, None, None, None, 8]


BAD_TRACE_LINES = [
    ('{"at": "2024-01-01T00:00:01Z", "status": 200}', "keys ['at', 'status']"),
    ('{"at": "2024-01-01T00:00:01Z", "foo": 1}', "keys ['at', 'foo']"),
    ('{"status": 200, "body": {}}', "keys ['body', 'status']"),
    ("not json", "not JSON"),
    ('{"at": "2023-01-01T00:00:00Z", "error": "timeout"}', "goes back in time"),
    ('{"at": "2024-01-01T00:00:01Z", "agent": "pause"}', "'agent' must be"),
    ('{"at": "2024-01-01T00:00:01Z", "status": 99, "text": ""}', "HTTP status code"),
]


@pytest.mark.parametrize("line, expect", BAD_TRACE_LINES)
def test_bad_trace_lines_name_file_and_line(tmp_path, line, expect):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"at": "2024-01-01T00:00:00Z", "status": 200, "body": {}}\n' + line + "\n")
    with pytest.raises(TraceError) as info:
        load_trace(path)
    assert f"{path}:2" in str(info.value) and expect in str(info.value)


@pytest.mark.process
@pytest.mark.parametrize("line, expect", BAD_TRACE_LINES)
def test_replay_and_the_simulator_read_traces_with_one_set_of_rules(tmp_path, line, expect):
    """One trace reader: replay refuses exactly what the simulator refuses, with the same line."""
    path = tmp_path / "bad.jsonl"
    path.write_text('{"at": "2024-01-01T00:00:00Z", "status": 200, "body": {}}\n' + line + "\n")
    with pytest.raises(TraceError) as info:
        load_trace(path)
    r = subprocess.run(
        [sys.executable, "-m", "se_forwarder.cli", "replay", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.strip() == str(info.value)


# ---------------------------------------------------------------------------------------------
# Shipped scenarios play through

S, ST = "Scheduled", "Started"
EXPECTED = {
    "live-migration-freeze": [[], [(0, S)], [(0, ST)], []],
    "user-reboot-approved": [[], [(0, S)], [(0, ST)], []],
    "redeploy": [[], [(0, S)], [(0, ST)], []],
    "spot-preempt": [[], [(0, S)], [(0, ST)], []],
    "cancelled": [[], [(0, S)], []],
    "hardware-failure": [[], [(0, ST)], []],
    "reschedule": [[], [(0, S)], [(0, S)], [(0, ST)], []],
    "availability-set": [
        [],
        [(0, S)],
        [(0, S), (1, S)],
        [(0, S), (1, S), (2, S)],
        [(0, S), (1, S), (2, ST)],
        [(0, ST), (1, S), (2, ST)],
        [(0, ST), (1, ST), (2, ST)],
        [(0, ST), (1, ST)],
        [(1, ST)],
        [(1, ST), (3, S)],
        [(3, S)],
        [(3, ST)],
        [],
    ],
    "demo": [
        [],
        [(0, S)],
        [(0, S), (1, S)],
        [(0, S), (1, S), (2, S)],
        [(0, S), (1, S), (2, S), (3, S)],
        [(0, S), (1, S), (3, S)],
        [(0, ST), (1, S), (3, S)],
        [(0, ST), (1, ST), (3, S)],
        [(0, ST), (1, ST), (3, S)],
        [(1, ST), (3, S)],
        [(3, S)],
        [(3, S), (4, S)],
        [(3, ST), (4, S)],
        [(4, S), (5, ST)],
        [(4, ST), (5, ST)],
        [(5, ST)],
        [],
    ],
}


def test_every_shipped_scenario_has_an_expectation():
    assert set(builtin_names()) == set(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_shipped_scenario_plays_to_its_end(name):
    sc = load_scenario(name)
    speed = sc.end / 0.6
    with Simulator(sc, speed=speed, rate_limit=None) as s, client(s) as c:
        ids = {s.event_id(i): i for i in range(len(sc.events))}
        polled = [get_doc(c)]
        assert s.wait_until_finished(10)
        faults = []
        while s.pending_faults():  # scripted faults are queued at their time, served to polls
            faults.append(c.get(SE, params={"api-version": V}, headers=H).status_code)
        assert faults == ([503, 200] if name == "demo" else [])
        polled.append(get_doc(c))
        changes = s.changes
    phases = [[(ids[e["EventId"]], e["EventStatus"]) for e in ch.events] for ch in changes]
    assert phases == EXPECTED[name]
    assert [ch.incarnation for ch in changes] == list(range(1, len(changes) + 1))
    assert polled[-1] == {"DocumentIncarnation": len(changes), "Events": []}
    assert [ch.scenario_time for ch in changes] == sorted(ch.scenario_time for ch in changes)
    # nothing starts before its NotBefore unless it was approved (nobody approves here)
    not_before: dict[str, float] = {}
    for ch in changes:
        for e in ch.events:
            if e["NotBefore"]:
                not_before[e["EventId"]] = parsedate_to_datetime(e["NotBefore"]).timestamp()
            elif e["EventId"] in not_before:
                assert ch.wall >= not_before[e["EventId"]] - 0.001


def _first_seen(sc: Scenario, name: str) -> dict[str, dict]:
    with Simulator(sc, speed=sc.end / 0.4, rate_limit=None) as s:
        assert s.wait_until_finished(10)
        out: dict[str, dict] = {}
        for ch in s.changes:
            for e in ch.events:
                out.setdefault(e["EventId"], dict(e, _appear=ch.scenario_time))
        return out


def test_scenario_specifics():
    freeze = load_scenario("live-migration-freeze")
    ev = freeze.events[0]
    assert (ev.id, ev.type, ev.duration, ev.not_before - ev.appear) == (
        "C7061BAC-AFDC-4513-B24B-AA5F13A16123",
        "Freeze",
        5,
        900,
    )
    assert freeze.vm.name == "WestNO_0"
    seen = _first_seen(freeze, "live-migration-freeze")
    assert seen[ev.id]["Resources"] == ["WestNO_0", "WestNO_1"]
    spot = load_scenario("spot-preempt").events[0]
    assert (spot.type, spot.not_before - spot.appear) == ("Preempt", 30)
    assert load_scenario("user-reboot-approved").events[0].source == "User"
    assert load_scenario("redeploy").events[0].type == "Redeploy"
    hw = load_scenario("hardware-failure").events[0]
    assert (hw.type, hw.started) == ("Reboot", True)
    avail = load_scenario("availability-set")
    names = [set(e.resources) for e in avail.events]
    assert sum("$vm" not in n for n in names) >= len(names) - 1 >= 2


def test_demo_plays_in_about_45_seconds_with_the_promised_mix():
    demo = load_scenario("demo")
    assert 40 <= demo.end / demo.speed <= 50
    with Simulator(demo, speed=demo.end / 0.6, rate_limit=None) as s:
        assert s.wait_until_finished(10)
        changes = s.changes
        vm = s.scenario.vm.name
    history: dict[str, list[dict]] = {}
    for ch in changes:
        for e in ch.events:
            history.setdefault(e["EventId"], []).append(e)
    types = {h[0]["EventType"] for h in history.values()}
    assert len(types) >= 3
    others_only = [h for h in history.values() if vm not in h[0]["Resources"]]
    cancelled = [h for h in history.values() if all(e["EventStatus"] == S for e in h)]
    rescheduled = [
        h
        for h in history.values()  # NotBefore has second resolution: at this
        if len(
            {
                (e["NotBefore"], e["DurationInSeconds"])  # speed, look at both
                for e in h
                if e["EventStatus"] == S
            }
        )
        > 1
    ]
    hardware = [h for h in history.values() if h[0]["EventStatus"] == ST]
    assert len(others_only) >= 1 and len(cancelled) >= 1 and len(rescheduled) >= 1
    assert len(hardware) >= 1 and hardware[0][0]["EventType"] == "Reboot"
    assert [f.kind for f in demo.faults] == ["503", "empty"]


# ---------------------------------------------------------------------------------------------
# Scenario validation


@pytest.mark.parametrize(
    "text, expect",
    [
        ("sped = 2", ["sped", "Extra inputs"]),
        ('[vm]\nnmae = "x"', ["vm.nmae"]),
        (
            '[[events]]\ntype = "Freeze"\nresources = ["a"]\nnot_befor = 10',
            ["events[0].not_befor", "Extra inputs"],
        ),
        ('[[events]]\ntype = "Explode"\nresources = ["a"]\nnot_before = 10', ["events[0].type"]),
        ('[[events]]\ntype = "Freeze"\nresources = []\nnot_before = 10', ["events[0].resources"]),
        ('[[events]]\ntype = "Freeze"\nresources = ["a"]', ["events[0]", "not_before is required"]),
        (
            '[[events]]\ntype = "Freeze"\nresources = ["a"]\nappear = 20\nnot_before = 10',
            ["events[0]", "not_before must not be earlier than appear"],
        ),
        (
            '[[events]]\ntype = "Freeze"\nresources = ["a"]\nnot_before = 10\nstart = 5',
            ["events[0]", "start must not be earlier than not_before"],
        ),
        (
            '[[events]]\ntype = "Reboot"\nresources = ["a"]\nstarted = true\nnot_before = 10',
            ["events[0]", "not_before is not allowed"],
        ),
        (
            '[[events]]\ntype = "Reboot"\nresources = ["a"]\nnot_before = 10\nduration = -2',
            ["events[0].duration"],
        ),
        (
            (
                '[[events]]\ntype = "Reboot"\nresources = ["a"]\nnot_before = 100\n'
                "[[events.reschedule]]\nat = 50\nnot_before = 200\n"
                "[[events.reschedule]]\nat = 40\nnot_before = 300"
            ),
            ["events[0]", "increasing"],
        ),
        (
            (
                '[[events]]\ntype = "Reboot"\nresources = ["a"]\nnot_before = 100\n'
                "[[events.reschedule]]\nat = 50\nnotbefore = 200"
            ),
            ["events[0].reschedule[0].notbefore"],
        ),
        (
            (
                '[[events]]\nid = "X"\ntype = "Reboot"\nresources = ["a"]\nnot_before = 1\n'
                '[[events]]\nid = "x"\ntype = "Reboot"\nresources = ["a"]\nnot_before = 1'
            ),
            ["unique"],
        ),
        (
            (
                '[[events]]\ntype = "Reboot"\nresources = ["a"]\nnot_before = 100\n'
                "[[events.reschedule]]\nat = 50\nnot_before = 50"
            ),
            ["events[0].reschedule[0]", "not_before must be later than at"],
        ),
        ('[[faults]]\nkind = "418"', ["faults[0].kind"]),
        ("speed = 0", ["speed"]),
        ("speed = ", ["not valid TOML"]),
    ],
)
def test_invalid_scenarios_name_the_file_and_key(tmp_path, text, expect):
    path = tmp_path / "broken.toml"
    path.write_text(text)
    with pytest.raises(ScenarioError) as info:
        load_scenario(path)
    msg = str(info.value)
    assert msg.startswith(str(path)), msg
    for part in expect:
        assert part in msg, msg


def test_scenario_by_name_or_path_and_unknown_name(tmp_path):
    path = tmp_path / "mine.toml"
    path.write_text('[[events]]\ntype = "Terminate"\nresources = ["$vm"]\nnot_before = 300\n')
    sc = load_scenario(path)
    assert (sc.name, sc.events[0].type) == ("mine", "Terminate")
    assert load_scenario("demo").name == "demo"
    with pytest.raises(ScenarioError, match="no such scenario"):
        load_scenario("no-such-scenario")
    with pytest.raises(ScenarioError, match="cannot read"):
        load_scenario(tmp_path / "missing.toml")


def test_vm_placeholder_follows_the_vm_name():
    with Simulator("live-migration-freeze", vm_name="WestNO_1", speed=900) as s:
        assert s.wait_until(lambda x: x.events(), 5)
        assert s.events()[0]["Resources"] == ["WestNO_1", "WestNO_1"]
        assert s.instance_document()["compute"]["name"] == "WestNO_1"


# ---------------------------------------------------------------------------------------------
# Instance document


def test_instance_document_from_the_scenario():
    sc = scenario(
        vm={
            "name": "web_3",
            "scale_set": "web",
            "zone": "2",
            "fault_domain": 1,
            "update_domain": 4,
            "vm_size": "Standard_F4s_v2",
            "subscription_id": "11111111-2222-3333-4444-555555555555",
            "resource_group": "rg-web",
            "location": "northeurope",
            "vm_id": "aaaa0000-1111-2222-3333-444455556666",
            "tags": {"a": "b"},
        }
    )
    with Simulator(sc, rate_limit=None) as s, client(s) as c:
        r = c.get("/metadata/instance", params={"api-version": "2021-02-01"}, headers=H)
        assert r.status_code == 200
        comp = r.json()["compute"]
        assert {
            k: comp[k]
            for k in (
                "name",
                "vmId",
                "subscriptionId",
                "resourceGroupName",
                "location",
                "zone",
                "vmScaleSetName",
                "platformFaultDomain",
                "platformUpdateDomain",
                "vmSize",
                "osType",
            )
        } == {
            "name": "web_3",
            "vmId": "aaaa0000-1111-2222-3333-444455556666",
            "subscriptionId": "11111111-2222-3333-4444-555555555555",
            "resourceGroupName": "rg-web",
            "location": "northeurope",
            "zone": "2",
            "vmScaleSetName": "web",
            "platformFaultDomain": "1",
            "platformUpdateDomain": "4",
            "vmSize": "Standard_F4s_v2",
            "osType": "Linux",
        }
        assert comp["resourceId"] == (
            "/subscriptions/11111111-2222-3333-4444-555555555555/resourceGroups/rg-web/providers"
            "/Microsoft.Compute/virtualMachineScaleSets/web/virtualMachines/3"
        )
        assert comp["tagsList"] == [{"name": "a", "value": "b"}]
        assert r.json()["network"]["interface"][0]["ipv4"]["ipAddress"][0]["privateIpAddress"]
        for version in ("2017-08-01", "2019-06-01", "2020-09-01", "2021-02-01", "2021-12-13"):
            assert (
                c.get("/metadata/instance", params={"api-version": version}, headers=H).status_code
                == 200
            )
        assert (
            c.get("/metadata/instance", params={"api-version": "2020-07-02"}, headers=H).status_code
            == 400
        )
        sub = c.get("/metadata/instance/compute", params={"api-version": "2021-02-01"}, headers=H)
        assert sub.json() == comp
        leaf = {"api-version": "2021-02-01", "format": "text"}
        r = c.get("/metadata/instance/compute/vmId", params=leaf, headers=H)
        assert (r.status_code, r.text) == (200, "aaaa0000-1111-2222-3333-444455556666")
        assert (
            c.get(
                "/metadata/instance/compute/vmId", params={"api-version": "2021-02-01"}, headers=H
            ).status_code
            == 400
        )
        assert c.get("/metadata/instance/compute/nope", params=leaf, headers=H).status_code == 404


# ---------------------------------------------------------------------------------------------
# Managed identity

UAI = {
    "client_id": "5f5e8d3c-0a5b-4a5e-9d16-8a4c3a9c7e01",
    "object_id": "0b4d0a6e-63f7-46b3-8f6c-2a6b7c0d9e12",
    "resource_id": "/subscriptions/s/resourceGroups/rg/providers/"
    "Microsoft.ManagedIdentity/userAssignedIdentities/se-forwarder",
}


@pytest.fixture
def mi_env(monkeypatch):
    """Point azure-identity at the simulator, as AKS pod identity does, with nothing in the way."""
    for var in (
        "IDENTITY_ENDPOINT",
        "IDENTITY_HEADER",
        "MSI_ENDPOINT",
        "MSI_SECRET",
        "IMDS_ENDPOINT",
        "IDENTITY_SERVER_THUMBPRINT",
        "AZURE_CLIENT_ID",
        "AZURE_FEDERATED_TOKEN_FILE",
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "ALL_PROXY",
        "http_proxy",
        "https_proxy",
        "all_proxy",
    ):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    authority = TokenAuthority()
    with Simulator(scenario(identities=[UAI]), token_authority=authority, rate_limit=None) as s:
        monkeypatch.setenv("AZURE_POD_IDENTITY_AUTHORITY_HOST", s.url)
        yield s


def test_real_managed_identity_credential_system_assigned(mi_env):
    from azure.identity import ManagedIdentityCredential

    with ManagedIdentityCredential() as cred:
        token = cred.get_token(MONITOR_AUDIENCE + "/.default")
    claims = mi_env.token_authority.verify(token.token, MONITOR_AUDIENCE)
    assert claims["sub"] == "system-assigned"
    assert token.expires_on > time.time() + 3600
    with pytest.raises(InvalidToken):
        mi_env.token_authority.verify(token.token, "https://eventhubs.azure.net")
    with pytest.raises(InvalidToken):
        TokenAuthority().verify(token.token, MONITOR_AUDIENCE)
    (req,) = [r for r in mi_env.requests if r.path.startswith("/metadata/identity")]
    assert req.status == 200 and req.headers["Metadata"] == "true" and "client_id" not in req.path


def test_real_managed_identity_credential_user_assigned_by_client_id(mi_env):
    from azure.identity import ManagedIdentityCredential

    with ManagedIdentityCredential(client_id=UAI["client_id"]) as cred:
        token = cred.get_token("https://eventhubs.azure.net/.default")
    claims = mi_env.token_authority.verify(token.token, "https://eventhubs.azure.net")
    assert claims["sub"] == UAI["client_id"]
    assert any(f"client_id={UAI['client_id']}" in r.path for r in mi_env.requests)


def test_real_credential_with_unknown_identity_fails(mi_env):
    from azure.core.exceptions import ClientAuthenticationError
    from azure.identity import ManagedIdentityCredential

    with (
        ManagedIdentityCredential(client_id="00000000-dead-beef-0000-000000000000") as cred,
        pytest.raises(ClientAuthenticationError, match="Identity not found"),
    ):
        cred.get_token(MONITOR_AUDIENCE + "/.default")


def test_token_endpoint_rules(mi_env):
    path = "/metadata/identity/oauth2/token"
    base = {"api-version": "2018-02-01", "resource": MONITOR_AUDIENCE}
    with client(mi_env) as c:
        r = c.get(path, params=base, headers=H)
        body = r.json()
        assert r.status_code == 200 and set(body) >= {
            "access_token",
            "expires_in",
            "expires_on",
            "resource",
            "token_type",
        }
        assert all(isinstance(body[k], str) for k in ("expires_in", "expires_on", "resource"))
        assert body["token_type"] == "Bearer" and body["resource"] == MONITOR_AUDIENCE
        assert int(body["expires_on"]) - int(body["expires_in"]) == pytest.approx(
            time.time(), abs=2
        )
        for key, value in (("object_id", UAI["object_id"]), ("msi_res_id", UAI["resource_id"])):
            r = c.get(path, params=dict(base, **{key: value}), headers=H)
            claims = mi_env.token_authority.verify(r.json()["access_token"], MONITOR_AUDIENCE)
            assert claims["sub"] == UAI["client_id"]
        r = c.get(path, params=dict(base, client_id="nope"), headers=H)
        assert (r.status_code, r.json()) == (
            400,
            {"error": "invalid_request", "error_description": "Identity not found"},
        )
        assert c.get(path, params=base).status_code == 400
        assert c.get(path, params={"resource": MONITOR_AUDIENCE}, headers=H).status_code == 400
        assert c.get(path, params={"api-version": "2018-02-01"}, headers=H).status_code == 400


def test_token_identity_selection_without_system_identity():
    two = dict(UAI, client_id="c2", object_id="o2", resource_id="r2")
    path = "/metadata/identity/oauth2/token"
    base = {"api-version": "2018-02-01", "resource": MONITOR_AUDIENCE}
    with (
        Simulator(scenario(system_identity=False, identities=[UAI]), rate_limit=None) as s,
        client(s) as c,
    ):
        tok = c.get(path, params=base, headers=H).json()["access_token"]
        assert s.token_authority.verify(tok, MONITOR_AUDIENCE)["sub"] == UAI["client_id"]
    with (
        Simulator(scenario(system_identity=False, identities=[UAI, two]), rate_limit=None) as s,
        client(s) as c,
    ):
        r = c.get(path, params=base, headers=H)
        assert r.status_code == 400 and "Multiple user assigned" in r.json()["error_description"]
    with Simulator(scenario(system_identity=False), rate_limit=None) as s, client(s) as c:
        r = c.get(path, params=base, headers=H)
        assert r.status_code == 400 and r.json()["error_description"] == "Identity not found"


# ---------------------------------------------------------------------------------------------
# The change log and the hand-driven document (latency benchmarks)


def test_change_log_records_when_each_incarnation_became_visible(sim):
    before = time.time()
    inc = sim.set_events([one_event()])
    after = time.time()
    last = sim.changes[-1]
    assert last.incarnation == inc and before <= last.wall <= after
    assert last.events[0]["EventId"] == one_event()["EventId"]
    with client(sim) as c:
        assert get_doc(c)["DocumentIncarnation"] == inc


def test_scheduled_changes_are_published_on_time():
    sc = scenario(
        events=[
            {"type": "Freeze", "resources": ["$vm"], "appear": 30, "not_before": 60, "remove": 90}
        ]
    )
    with Simulator(sc, speed=100) as s:
        assert s.wait_until_finished(5)
        changes = s.changes
    for ch, expected in zip(changes[1:], (30, 60, 90), strict=False):
        assert ch.scenario_time == expected
        assert 0 <= ch.wall - s.wall_time_of(expected) < 0.05  # the clock thread is prompt


# ---------------------------------------------------------------------------------------------
# The command


def _spawn(*args: str) -> subprocess.Popen:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    return subprocess.Popen(
        [sys.executable, "-m", "se_forwarder_testbed.simulator.command", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


@pytest.mark.process
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_command_prints_url_logs_requests_and_stops_on_signal(sig):
    p = _spawn("--scenario", "demo", "--speed", "6000", "--vm-name", "cmd-vm")
    try:
        url = p.stdout.readline().strip()
        assert re.fullmatch(r"http://127\.0\.0\.1:\d+", url), url
        with httpx.Client(base_url=url, trust_env=False, timeout=5) as c:
            r = c.get("/metadata/instance", params={"api-version": "2021-02-01"}, headers=H)
            assert r.json()["compute"]["name"] == "cmd-vm"
            time.sleep(0.5)  # the demo is over by now; its two scripted faults come first
            statuses = [
                c.get(SE, params={"api-version": V}, headers=H).status_code for _ in range(3)
            ]
            assert statuses == [503, 200, 200]
            assert get_doc(c)["DocumentIncarnation"] > 1
        p.send_signal(sig)
        out, err = p.communicate(timeout=10)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 0, err
    assert out == ""
    assert '"GET /metadata/scheduledevents?api-version=2020-07-01" 200' in err


@pytest.mark.process
def test_command_serves_a_trace():
    p = _spawn("--trace", str(SHARED_TRACES / "live-migration-freeze.jsonl"), "--speed", "5000")
    try:
        url = p.stdout.readline().strip()
        with httpx.Client(base_url=url, trust_env=False, timeout=5) as c:
            time.sleep(0.5)
            assert get_doc(c)["DocumentIncarnation"] == 4
        p.send_signal(signal.SIGTERM)
        p.communicate(timeout=10)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 0


def test_command_bad_input_exits_2(tmp_path, capsys):
    import argparse

    parser = argparse.ArgumentParser()
    command.configure(parser)
    assert command.run(parser.parse_args(["--scenario", "no-such-thing"])) == 2
    assert "no such scenario" in capsys.readouterr().err
    bad = tmp_path / "bad.toml"
    bad.write_text("[[events]]\ntype = 1\n")
    assert command.run(parser.parse_args(["--scenario", str(bad)])) == 2
    assert str(bad) in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_:  # argparse: one line, exit 2
        parser.parse_args(["--speed", "0"])
    assert exit_.value.code == 2 and "positive" in capsys.readouterr().err
    args = parser.parse_args([])
    assert (args.host, args.port, args.rate_limit) == ("127.0.0.1", 0, 5)
