"""``se-forwarder replay`` against every trace with an expected file (shared/traces and
tests/traces), and the command-line contract (record-contract.md §1, §5)."""

from __future__ import annotations

import json
import re

import pytest
from helpers.traces import (
    OWN_TRACES,
    SHARED_TRACES,
    VM,
    event,
    iso,
    mismatches,
    ok,
    read_jsonl,
    replay_in_process,
    run_cli,
    shared_vm_names,
    start,
    stop,
    write_trace,
)

from se_forwarder import contract, tracefile

SHARED = sorted(SHARED_TRACES.glob("*.expected.jsonl"))
OWN = sorted(OWN_TRACES.glob("*.expected.jsonl"))


def trace_of(expected):
    return expected.with_name(expected.name.replace(".expected.jsonl", ".jsonl"))


def test_trace_sets_are_there():
    assert SHARED, f"no shared traces under {SHARED_TRACES}"
    assert len(OWN) >= 20
    for path in OWN_TRACES.glob("*.jsonl"):
        if not path.name.endswith(".expected.jsonl"):
            assert path.with_name(path.stem + ".expected.jsonl").exists(), path


@pytest.mark.parametrize("expected", SHARED, ids=lambda p: p.name)
def test_shared_trace_through_the_cli(expected, tmp_path):
    vm = shared_vm_names()[trace_of(expected).name]
    res = run_cli("replay", str(trace_of(expected)), "--vm-name", vm, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    records = [json.loads(x) for x in res.stdout.splitlines()]
    assert mismatches(records, read_jsonl(expected)) == []


@pytest.mark.parametrize("expected", SHARED, ids=lambda p: p.name)
def test_shared_trace_in_process(expected, tmp_path):
    vm = shared_vm_names()[trace_of(expected).name]
    records = replay_in_process(trace_of(expected), vm, tmp=tmp_path)
    assert mismatches(records, read_jsonl(expected)) == []


@pytest.mark.parametrize("expected", OWN, ids=lambda p: p.name.removesuffix(".expected.jsonl"))
def test_own_trace_in_process(expected, tmp_path):
    records = replay_in_process(trace_of(expected), VM, tmp=tmp_path)
    assert mismatches(records, read_jsonl(expected)) == []


# A few of our own through the real command too (the rest in-process keeps the suite fast).
CLI_OWN = [
    "restart-every-step",
    "bad-observations",
    "several-events",
    "spot-preempt",
    "incarnation-reset-started",
]


@pytest.mark.parametrize("name", CLI_OWN)
def test_own_trace_through_the_cli(name, tmp_path):
    res = run_cli("replay", str(OWN_TRACES / f"{name}.jsonl"), "--vm-name", VM, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    records = [json.loads(x) for x in res.stdout.splitlines()]
    assert mismatches(records, read_jsonl(OWN_TRACES / f"{name}.expected.jsonl")) == []


# -- output shape -----------------------------------------------------------------------------

DATETIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")
CHECK = {
    "string": lambda v: isinstance(v, str),
    "datetime": lambda v: isinstance(v, str) and DATETIME.match(v),
    "dynamic": lambda v: isinstance(v, list),
    "int": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "long": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "real": lambda v: isinstance(v, float),
    "bool": lambda v: isinstance(v, bool),
}
NEVER_NULL = {
    "TimeGenerated",
    "RecordId",
    "Phase",
    "EventId",
    "EventType",
    "EventStatus",
    "Resources",
    "DocumentIncarnation",
    "FirstSeenAt",
    "SinceFirstSeenSeconds",
    "AgentVersion",
}


def test_stdout_is_only_json_lines_with_every_contract_column(tmp_path):
    res = run_cli(
        "replay", str(OWN_TRACES / "bad-observations.jsonl"), "--vm-name", VM, cwd=tmp_path
    )
    assert res.returncode == 0
    assert "bad observation" in res.stderr  # logs go to standard error...
    lines = res.stdout.splitlines()
    assert len(lines) == 2 and res.stdout.endswith("\n")
    columns = contract.table("records").columns
    for line in lines:  # ...and standard output carries records only
        rec = json.loads(line)
        assert list(rec) == [c.name for c in columns]
        for c in columns:
            value = rec[c.name]
            if value is None:
                assert c.name not in NEVER_NULL, c.name
            else:
                assert CHECK[c.type](value), (c.name, c.type, value)


def test_all_own_records_have_contract_types(tmp_path):
    columns = contract.table("records").columns
    for expected in OWN:
        for rec in replay_in_process(trace_of(expected), VM, tmp=tmp_path):
            for c in columns:
                v = rec[c.name]
                assert (v is None and c.name not in NEVER_NULL) or (
                    v is not None and CHECK[c.type](v)
                ), (expected.name, c.name, v)
            assert (rec["Outcome"] is not None) == (rec["Phase"] == "Removed")


def test_without_vm_name_identity_and_affects_are_null(tmp_path):
    records = replay_in_process(OWN_TRACES / "several-events.jsonl", None, tmp=tmp_path)
    assert records
    for r in records:
        assert r["VmName"] is None and r["AffectsThisVm"] is None
        for col in (
            "VmId",
            "VmResourceId",
            "SubscriptionId",
            "ResourceGroup",
            "Location",
            "Zone",
            "ScaleSetName",
            "FaultDomain",
            "UpdateDomain",
            "Computer",
        ):
            assert r[col] is None


def test_output_is_deterministic_byte_for_byte(tmp_path):
    path = OWN_TRACES / "restart-every-step.jsonl"
    runs = [run_cli("replay", str(path), "--vm-name", VM, cwd=tmp_path) for _ in range(2)]
    assert runs[0].returncode == runs[1].returncode == 0
    assert runs[0].stdout and runs[0].stdout == runs[1].stdout


def test_help(tmp_path):
    res = run_cli("replay", "--help", cwd=tmp_path)
    assert res.returncode == 0
    for word in ("TRACE", "--vm-name", "--state-dir"):
        assert word in res.stdout
    top = run_cli("--help", cwd=tmp_path)
    assert top.returncode == 0 and "replay" in top.stdout


def test_usage_error_exits_2(tmp_path):
    res = run_cli("replay", cwd=tmp_path)  # TRACE missing
    assert res.returncode == 2 and res.stdout == ""


# -- --state-dir ------------------------------------------------------------------------------

E = "0b8b3c8e-9999-4a4a-9c9c-000000000001"
LIFE = [
    ok(0, 1, []),
    ok(1, 2, [event(E, nb=901)]),
    ok(2, 3, [event(E, nb=1201)]),
    ok(1202, 4, [event(E, "Started", nb="")]),
    ok(1300, 5, []),
]
LIFE_TIMES = [0, 1, 2, 1202, 1300]


@pytest.mark.parametrize("cut", range(1, len(LIFE)))
def test_state_dir_keeps_state_across_runs(cut, tmp_path):
    """Two runs on one --state-dir are one agent stopped and started at the cut: same records,
    none twice, and the second run knows what the first saw."""
    state = tmp_path / "state"
    first = write_trace(tmp_path / "a.jsonl", LIFE[:cut])
    second = write_trace(tmp_path / "b.jsonl", LIFE[cut:])
    outs = []
    for path in (first, second):
        res = run_cli("replay", str(path), "--vm-name", VM, "--state-dir", str(state), cwd=tmp_path)
        assert res.returncode == 0, res.stderr
        outs += [json.loads(x) for x in res.stdout.splitlines()]
    phases = [(r["Phase"], r["TimeGenerated"]) for r in outs]
    # the lifecycle by hand: FirstSeen at 1, Updated at 2, Started at 1202, Removed at 1300
    assert phases == [
        ("FirstSeen", iso(1)),
        ("Updated", iso(2)),
        ("Started", iso(1202)),
        ("Removed", iso(1300)),
    ]
    removed = outs[-1]
    assert removed["Outcome"] == "Completed" and removed["SinceStartedSeconds"] == 98.0
    # the very same records as one run with the agent stopped and started at the cut
    t = LIFE_TIMES[cut - 1]
    whole = write_trace(tmp_path / "w.jsonl", [*LIFE[:cut], stop(t), start(t), *LIFE[cut:]])
    assert replay_in_process(whole, VM, tmp=tmp_path) == outs


def test_state_dir_second_run_starts_from_saved_state(tmp_path):
    state = tmp_path / "state"
    a = write_trace(tmp_path / "a.jsonl", [ok(0, 1, [event(E, nb=900)])])
    b = write_trace(tmp_path / "b.jsonl", [ok(30, 2, [])])
    r1 = run_cli("replay", str(a), "--vm-name", VM, "--state-dir", str(state), cwd=tmp_path)
    r2 = run_cli("replay", str(b), "--vm-name", VM, "--state-dir", str(state), cwd=tmp_path)
    assert [json.loads(x)["Phase"] for x in r1.stdout.splitlines()] == ["FirstSeen"]
    (removed,) = [json.loads(x) for x in r2.stdout.splitlines()]
    # a new run is a restart: the removal spans it, so Unknown although only 30 s passed
    assert removed["Phase"] == "Removed" and removed["Outcome"] == "Unknown"
    assert removed["UncertaintySeconds"] == 30.0 and removed["FirstSeenAt"] == iso(0)
    # without --state-dir every run starts fresh: the same trace b gives nothing
    r3 = run_cli("replay", str(b), "--vm-name", VM, cwd=tmp_path)
    assert r3.returncode == 0 and r3.stdout == ""
    assert (state / "state.db").exists()


def test_trace_ending_with_the_agent_stopped_is_clean(tmp_path):
    path = write_trace(tmp_path / "t.jsonl", [ok(0, 1, [event(E)]), stop(1)])
    res = run_cli("replay", str(path), "--vm-name", VM, cwd=tmp_path)
    assert res.returncode == 0
    assert len(res.stdout.splitlines()) == 1
    assert '"level":"error"' not in res.stderr, res.stderr


# -- malformed traces -------------------------------------------------------------------------

GOOD = json.dumps(ok(0, 1, [event(E)]))  # would print a FirstSeen if it got that far
MALFORMED = {
    "not-json": "{at: 1}",
    "not-an-object": "[1, 2]",
    "unknown-keys": '{"at": "2024-03-01T10:00:05Z", "status": 200, "bodyy": {}}',
    "extra-key": '{"at": "2024-03-01T10:00:05Z", "error": "timeout", "x": 1}',
    "no-at": '{"status": 200, "body": {}}',
    "at-not-a-time": '{"at": "yesterday", "error": "timeout"}',
    "at-a-number": '{"at": 1700000000, "error": "timeout"}',
    "at-year-10000": '{"at": "9999-12-31T23:00:00-05:00", "error": "timeout"}',
    "at-goes-back": '{"at": "2024-03-01T09:59:59Z", "error": "timeout"}',
    "agent-bad": '{"at": "2024-03-01T10:00:05Z", "agent": "restart"}',
    "agent-start-while-running": '{"at": "2024-03-01T10:00:05Z", "agent": "start"}',
    "status-not-int": '{"at": "2024-03-01T10:00:05Z", "status": "200", "body": {}}',
    "status-bool": '{"at": "2024-03-01T10:00:05Z", "status": true, "body": {}}',
    "status-out-of-range": '{"at": "2024-03-01T10:00:05Z", "status": 42, "text": ""}',
    "text-not-string": '{"at": "2024-03-01T10:00:05Z", "status": 500, "text": 5}',
    "error-not-string": '{"at": "2024-03-01T10:00:05Z", "error": null}',
    "deeply-nested": "[" * 100_000,
}


@pytest.mark.parametrize("name", sorted(MALFORMED))
def test_malformed_line_is_named_and_nothing_is_emitted(name, tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text(GOOD + "\n\n" + MALFORMED[name] + "\n" + GOOD + "\n", encoding="utf-8")
    with pytest.raises(tracefile.TraceError, match=rf"^{re.escape(str(path))}:3: "):
        tracefile.read(path)


@pytest.mark.parametrize(
    "content,lineno",
    [
        (
            GOOD
            + "\n"
            + '{"at": "2024-03-01T10:00:05Z", "agent": "stop"}\n'
            + '{"at": "2024-03-01T10:00:06Z", "error": "timeout"}\n',
            3,
        ),  # observation while stopped
        (
            GOOD
            + "\n"
            + '{"at": "2024-03-01T10:00:05Z", "agent": "stop"}\n'
            + '{"at": "2024-03-01T10:00:06Z", "agent": "stop"}\n',
            3,
        ),
    ],
)
def test_agent_lines_out_of_order(content, lineno, tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(tracefile.TraceError, match=rf":{lineno}: "):
        tracefile.read(path)


@pytest.mark.parametrize("name", ["not-json", "at-goes-back", "status-bool"])
def test_malformed_trace_through_the_cli(name, tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text(GOOD + "\n" + MALFORMED[name] + "\n", encoding="utf-8")
    res = run_cli("replay", str(path), "--vm-name", VM, cwd=tmp_path)
    assert res.returncode == 2
    assert res.stdout == ""  # not even the FirstSeen of line 1
    assert re.match(rf"^{re.escape(str(path))}:2: \S", res.stderr), res.stderr
    assert len(res.stderr.strip().splitlines()) == 1


def test_non_utf8_line_is_named(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_bytes(GOOD.encode() + b"\n" + b'{"at": "2024-03-01T10:00:05Z", "error": "\xff"}\n')
    res = run_cli("replay", str(path), cwd=tmp_path)
    assert res.returncode == 2 and res.stdout == ""
    assert res.stderr.startswith(f"{path}:2: ")


def test_missing_trace_file(tmp_path):
    res = run_cli("replay", str(tmp_path / "nope.jsonl"), cwd=tmp_path)
    assert res.returncode == 2 and res.stdout == ""
    assert "nope.jsonl" in res.stderr


def test_blank_lines_and_naive_times_are_accepted(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text(
        "\n"
        + json.dumps(
            {
                "at": "2024-03-01T10:00:00",
                "status": 200,
                "body": {"DocumentIncarnation": 1, "Events": [event(E)]},
            }
        )
        + "\n\n",
        "utf-8",
    )
    (rec,) = replay_in_process(path, VM, tmp=tmp_path)
    assert rec["TimeGenerated"] == iso(0)  # naive means UTC
