"""The webhook sink against the local HTTPS stand-in that answers like Slack and Teams: the three
formats, the filters, every answer mapped to the sink interface (429 with Retry-After, 5xx, 400
for a bad payload, 404/410 gone for good dead-lettered after the budget and never retried
forever), and the URL: a secret from a file or a variable, never in an error or check-config."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers.sink_answers import nothing_delivered

from se_forwarder import backoff
from se_forwarder.config import load
from se_forwarder.delivery import DeliveryPool
from se_forwarder.errors import ConfigError, Verdict
from se_forwarder.outbox import OutboxRow, Store
from se_forwarder.policy import PolicyConfig
from se_forwarder.policy.match import Policy
from se_forwarder.sinks.webhook.sink import WebhookSink
from se_forwarder_testbed.standins.webhooks import TOKEN, WebhookStandIn

pytestmark = pytest.mark.e2e  # a TLS server per module

REC = {
    "TimeGenerated": "2026-01-01T00:00:00.000Z",
    "RecordId": "r-1",
    "Phase": "FirstSeen",
    "Outcome": None,
    "EventId": "e-1",
    "EventType": "Reboot",
    "EventStatus": "Scheduled",
    "EventSource": "User",
    "Resources": ["vm-a"],
    "DurationInSeconds": -1,
    "NotBefore": "2026-01-01T00:14:30.000Z",
    "AffectsThisVm": True,
    "VmName": "vm-a",
}


def row(seq: int = 1, **over) -> OutboxRow:
    rec = {**REC, **over}
    return OutboxRow.raw(
        "records", "vm-a", json.dumps(rec), seq=seq, phase=rec["Phase"], event_type=rec["EventType"]
    )


@pytest.fixture(scope="module")
def standin(tmp_path_factory):
    with WebhookStandIn(tmp_path_factory.mktemp("tls")) as s:
        yield s


@pytest.fixture
def hooks(standin):
    standin.answer_all(None)
    standin.script()
    yield standin
    standin.answer_all(None)


def sink(s: WebhookStandIn, kind: str = "slack", fmt: str | None = None, **kw) -> WebhookSink:
    return WebhookSink(s.url(kind), fmt=fmt or kind, ca_file=s.ca_cert, **kw)


def test_slack_and_teams_get_one_readable_line_and_json_gets_the_record(hooks):
    policy = Policy(PolicyConfig(preset="microsoft"))
    sink(hooks, "slack", policy=policy).send([row()])
    sink(hooks, "teams", policy=policy).send([row()])
    sink(hooks, "json").send([row()])
    [slack] = hooks.accepted("slack")
    [teams] = hooks.accepted("teams")
    text = slack["text"]
    assert text == (
        "vm-a: Reboot announced · Scheduled · User · this VM · NotBefore in 14m30s "
        "(2026-01-01T00:14:30.000Z) · expected impact: unknown · policy: approve at "
        'once (rule 1 "microsoft: user-initiated")'
    )
    assert teams["attachments"][0]["content"]["body"][0]["text"] == text
    assert hooks.accepted("json") == [json.loads(row().payload)]


@pytest.mark.parametrize(
    "over,words",
    [
        (
            {
                "Phase": "Started",
                "EventStatus": "Started",
                "StartDelaySeconds": -600.0,
                "NotBefore": None,
            },
            "vm-a: Reboot started 10m00s early · Started",
        ),
        (
            {
                "Phase": "Removed",
                "Outcome": "Cancelled",
                "AffectsThisVm": False,
                "Resources": ["vm-b"],
            },
            "ended (Cancelled) · Scheduled · User · other VMs: vm-b",
        ),
        (
            {"Phase": "Approved", "DurationInSeconds": 5, "EventType": "Freeze"},
            (
                "Freeze approved by this VM (it may start early) · Scheduled · User · this VM · "
                "NotBefore in 14m30s (2026-01-01T00:14:30.000Z) · expected impact 5s · policy: approved"
            ),
        ),
    ],
)
def test_each_phase_reads_as_a_sentence(hooks, over, words):
    sink(hooks).send([row(**over)])
    assert words in hooks.accepted("slack")[-1]["text"]


def test_filters_leave_records_out_without_a_request(hooks):
    before = len(hooks.requests)
    only = sink(hooks, phases=["FirstSeen"], event_types=["Reboot"], affects_this_vm=True)
    only.send([row(Phase="Started")])
    only.send([row(EventType="Freeze")])
    only.send([row(AffectsThisVm=False)])
    assert len(hooks.requests) == before
    only.send([row()])
    assert len(hooks.requests) == before + 1


def test_429_carries_retry_after_and_5xx_is_retried(hooks):
    s = sink(hooks)
    hooks.script((429, 7), 500)
    throttled = nothing_delivered(s.send([row()]))
    assert throttled.value.verdict is Verdict.RETRY
    assert throttled.value.retry_after == 7.0 and "rate_limited" in str(throttled.value)
    failed = nothing_delivered(s.send([row()]), match="answered 500")
    assert failed.value.verdict is Verdict.RETRY
    assert s.send([row()]).delivered == 1  # then delivered


def test_a_bad_payload_is_rejected_for_good(hooks):
    err = nothing_delivered(  # Slack wants {"text": ...}
        sink(hooks, "slack", fmt="json").send([row()]), match="400: invalid_payload"
    )
    assert err.value.verdict is Verdict.REJECT


def test_404_and_410_are_retried_slowly_then_gone_and_a_success_resets_the_count(hooks):
    from se_forwarder_testbed.fakeclock import FakeClock

    clock = FakeClock()
    s = sink(hooks, gone_after_seconds=120, clock=clock)
    hooks.answer_all(410)
    verdicts = []
    for step in (0, 60, 60, 1):
        clock.advance(step)
        err = nothing_delivered(s.send([row()]))
        verdicts.append(err.value.verdict)
    assert verdicts == [
        Verdict.SLOW_RETRY,
        Verdict.SLOW_RETRY,
        Verdict.DEAD_LETTER,
        Verdict.DEAD_LETTER,
    ]
    hooks.answer_all(None)
    s.send([row()])
    hooks.answer_all(404)
    err = nothing_delivered(s.send([row()]))  # counting starts again after a success
    assert err.value.verdict is Verdict.SLOW_RETRY


def test_the_url_never_appears_in_an_error(hooks):
    s = sink(hooks, gone_after_seconds=0)
    errors = []
    hooks.script((429, 1), 500, 403)
    for _ in range(3):
        err = nothing_delivered(s.send([row()]))
        errors.append(str(err.value))
    hooks.answer_all(404)
    err = nothing_delivered(s.send([row()]))
    assert err.value.verdict is Verdict.DEAD_LETTER
    errors.append(str(err.value))
    unreachable = WebhookSink(f"https://127.0.0.1:9/slack/{TOKEN}", fmt="slack")
    err = nothing_delivered(unreachable.send([row()]))
    assert err.value.verdict is Verdict.RETRY
    errors.append(str(err.value))
    assert all(TOKEN not in e and "https://127.0.0.1/***" in e for e in errors), errors


def test_a_url_gone_for_good_is_dead_lettered_with_the_reason_and_not_retried_forever(
    hooks, tmp_path, monkeypatch
):
    monkeypatch.setattr(backoff, "SLOW", backoff.Schedule(0.01, 0.01))  # 404/410: the slow schedule
    store = Store(tmp_path / "state")
    rows = [row(seq=0, EventId=f"e-{i}") for i in range(30)]
    store.commit("tracker", {}, rows)
    hooks.answer_all(410)
    base = len(hooks.requests)
    pool = DeliveryPool(
        [sink(hooks, gone_after_seconds=0.3)], store, tmp_path / "dead-letter.jsonl"
    )
    store.register_sinks(pool.names)
    pool.start()
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and store.depth("webhook") > 0:
            time.sleep(0.1)
        assert store.depth("webhook") == 0  # 30 > the worker's 20-in-a-row limit: none kept
        sent = len(hooks.requests)
        time.sleep(0.5)  # fifty retries' worth on the 0.01 s schedule
        assert len(hooks.requests) == sent  # nothing retried afterwards
    finally:
        pool.stop()
    letters = [json.loads(x) for x in (tmp_path / "dead-letter.jsonl").read_text().splitlines()]
    assert len(letters) == 30 and sent - base > 30 + 2  # the first tried for 0.3 s, the rest once
    assert "(for 0 s; gone)" in letters[0]["reason"]
    assert letters[0]["reason"].startswith(
        "undeliverable: webhook https://127.0.0.1/*** answered 410: channel_is_archived"
    )
    assert {x["record"]["EventId"] for x in letters} == {f"e-{i}" for i in range(30)}


def config(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "config.toml"
    path.write_text(f"[sinks.webhook]\n{body}\n")
    return path


@pytest.mark.parametrize(
    "body,named",
    [
        ("", "set exactly one of url_file / url_env"),
        ('url_env = "A"\nurl_file = "/x"', "set exactly one"),
        ('url_env = "NOT_SET_ANYWHERE_SE"', "url_env: the variable it names is empty or not set"),
        ('url_file = "{d}/nope"', "cannot read"),
        ('url_file = "{d}/http.url"', "does not hold an https:// URL"),
        ('url_file = "{d}/ok.url"\nmax_records = 5', "one record per request"),
        ('url_file = "{d}/ok.url"\nphases = ["Begun"]', "unknown phase 'Begun'"),
        ('url_file = "{d}/ok.url"\nformat = "discord"', "sinks.webhook.format"),
    ],
)
def test_bad_webhook_configs_are_refused_naming_the_key(tmp_path, body, named):
    (tmp_path / "http.url").write_text("http://hooks.example/T/B/secret\n")
    (tmp_path / "ok.url").write_text(f"https://hooks.example/{TOKEN}\n")
    with pytest.raises(ConfigError) as err:
        load(config(tmp_path, body.format(d=tmp_path)))
    assert named in str(err.value) and "sinks.webhook" in str(err.value)
    assert TOKEN not in str(err.value) and "/T/B/secret" not in str(err.value)


@pytest.mark.process
def test_check_config_shows_where_the_url_comes_from_never_the_url(tmp_path):
    (tmp_path / "hook.url").write_text(f"https://hooks.slack.com/services/{TOKEN}\n")
    path = config(tmp_path, f'url_file = "{tmp_path}/hook.url"\nformat = "slack"')
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "se_forwarder.cli",
            "check-config",
            "--config",
            str(path),
            "--as-invoker",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["sinks"]["webhook"]["url_file"] == f"{tmp_path}/hook.url"
    assert TOKEN not in r.stdout + r.stderr


def test_a_receiver_refusing_for_a_few_seconds_does_not_dead_letter_notifications(
    hooks, tmp_path, monkeypatch
):
    """410 for a second and a half (many tries on a fast schedule) is not "gone": the budget is a
    time (an hour by default), not a count of answers."""
    monkeypatch.setattr(backoff, "SLOW", backoff.Schedule(0.02, 0.02))
    store = Store(tmp_path / "state")
    store.commit("tracker", {}, [row(seq=0, EventId=f"e-{i}") for i in range(5)])
    hooks.answer_all(410)
    base = len(hooks.requests)
    pool = DeliveryPool([sink(hooks, "json")], store, tmp_path / "dead-letter.jsonl")
    store.register_sinks(pool.names)
    pool.start()
    try:
        time.sleep(1.5)
        refused = len(hooks.requests) - base
        hooks.answer_all(None)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and store.depth("webhook") > 0:
            time.sleep(0.05)
    finally:
        pool.stop()
    assert refused > 10  # it kept trying
    assert not (tmp_path / "dead-letter.jsonl").exists()
    assert [b["EventId"] for b in hooks.accepted("json")][-5:] == [f"e-{i}" for i in range(5)]


def test_the_old_count_setting_is_refused_with_its_new_name(tmp_path):
    (tmp_path / "ok.url").write_text(f"https://hooks.example/{TOKEN}\n")
    with pytest.raises(ConfigError, match="replaced by gone_after_seconds"):
        load(config(tmp_path, f'url_file = "{tmp_path}/ok.url"\ngone_after = 5'))


# -- messages that tell the truth (issue 18) ------------------------------------------------------

DRAIN = {
    "hooks": {"drain": {"command": ["true"]}, "undrain": {"command": ["true"]}},
    "rules": [{"pre_hooks": ["drain"], "post_hooks": ["undrain"], "approve": "after-hooks"}],
}


def test_a_started_line_says_what_azure_did_not_what_the_policy_would_have(hooks):
    """After a drain and an approval, the Started message said "not approved here: it has
    already started": the policy's words belong to the announcement, not to the start."""
    policy = Policy(PolicyConfig.model_validate(DRAIN))
    s = sink(hooks, policy=policy)
    s.send([row()])
    s.send([row(Phase="Started", EventStatus="Started", StartDelaySeconds=-300.0, NotBefore=None)])
    first, started = [b["text"] for b in hooks.accepted("slack")[-2:]]
    assert "policy: run drain, then approve, after it: run undrain (rule 1)" in first
    assert started == (
        "vm-a: Reboot started 5m00s early · Started · User · this VM · "
        "no NotBefore · expected impact: unknown"
    )


def test_in_a_dry_run_every_line_says_would(hooks):
    policy = Policy(PolicyConfig.model_validate({**DRAIN, "dry_run": True}))
    s = sink(hooks, policy=policy)
    s.send([row()])
    s.send([row(Phase="Removed", Outcome="Completed", EventStatus="Started")])
    first, ended = [b["text"] for b in hooks.accepted("slack")[-2:]]
    assert "policy: would run drain, then approve, after it: run undrain (rule 1, dry run)" in first
    assert ended.endswith("policy: after it: would run undrain (dry run)")


def notice(kind: str, **over) -> OutboxRow:
    from se_forwarder import notices
    from se_forwarder.model import LifecycleRecord, VmIdentity

    rec = {k: v for k, v in REC.items() if k != "VmName"}
    record = LifecycleRecord(
        **{
            **rec,
            "ResourceType": "VirtualMachine",
            "Description": "x",
            "DocumentIncarnation": 1,
            "FirstSeenAt": REC["TimeGenerated"],
            "StartedAt": None,
            "NoticeSeconds": 870.0,
            "SinceFirstSeenSeconds": 0.0,
            "StartDelaySeconds": None,
            "SinceStartedSeconds": None,
            "UncertaintySeconds": 1.0,
            "vm": VmIdentity(VmName="vm-a", Computer="vm-a"),
        }
    )
    at = 1767225600000 + 60_000  # a minute after the announcement
    return notices.Notice(kind, record, at, **over).row()


@pytest.mark.parametrize(
    "kind,over,words",
    [
        (
            "HookFailed",
            {
                "hook": "drain",
                "hook_phase": "pre",
                "state": "failed",
                "exit_code": 3,
                "reason": "failed (exit 3)",
                "consequence": "not approved: it starts at NotBefore",
            },
            (
                "vm-a: Reboot hook drain failed (exit 3) · Scheduled · this VM · NotBefore in 13m30s "
                "(2026-01-01T00:14:30.000Z) · policy: not approved: it starts at NotBefore"
            ),
        ),
        (
            "HookFailed",
            {
                "hook": "undrain",
                "hook_phase": "post",
                "state": "timeout",
                "reason": "timed out after 600 s",
            },
            "vm-a: Reboot after-hook undrain timed out after 600 s · Scheduled · this VM",
        ),
        (
            "ApprovalGivenUp",
            {"reason": "refused: HTTP 400", "consequence": "it starts at NotBefore"},
            "vm-a: Reboot approval given up (refused: HTTP 400) · Scheduled · this VM",
        ),
        (
            "StartedBeforeHooks",
            {"hook": "drain", "hook_phase": "pre", "reason": "hook drain was still running"},
            "vm-a: Reboot started while hook drain was still running · Scheduled · this VM",
        ),
    ],
)
def test_notices_are_one_readable_line_and_json_gets_them_as_they_are(hooks, kind, over, words):
    sink(hooks, phases=["Removed"]).send([notice(kind, **over)])  # phases never hide a notice
    assert words in hooks.accepted("slack")[-1]["text"]
    sink(hooks, "json").send([notice(kind, **over)])
    got = hooks.accepted("json")[-1]
    assert got["Notice"] == kind and got["EventId"] == "e-1" and got["VmName"] == "vm-a"


def test_notices_can_be_turned_off(hooks):
    before = len(hooks.requests)
    s = sink(hooks, notices=False)
    assert "notices" not in s.tables and "records" in s.tables
    assert before == len(hooks.requests)


def test_a_template_shapes_the_text_and_hostile_values_stay_values(hooks):
    s = sink(hooks, template="<!here> *$VmName*: $EventType $What ($When) $$5 · $Description")
    s.send([row(Description="<!channel> & <https://evil.example|click>")])
    text = hooks.accepted("slack")[-1]["text"]
    assert text == (
        "<!here> *vm-a*: Reboot announced (NotBefore in 14m30s "
        "(2026-01-01T00:14:30.000Z)) $5 · &lt;!channel&gt; &amp; "
        "&lt;https://evil.example|click&gt;"
    )
    sink(hooks, "teams", template="$Text").send([row()])
    teams = hooks.accepted("teams")[-1]["attachments"][0]["content"]["body"][0]["text"]
    assert teams.startswith("vm-a: Reboot announced · Scheduled")


@pytest.mark.parametrize(
    "body,named",
    [
        ('template = "$VmName ${Nope} $Other"', "unknown field(s) Nope, Other"),
        ('template = "costs $ 5"', "a '$' must start a field"),
        ('template = "{{__import__}}"\nformat = "json"', "template shapes the slack and teams"),
    ],
)
def test_a_bad_template_is_refused_when_the_config_is_loaded(tmp_path, body, named):
    (tmp_path / "ok.url").write_text(f"https://hooks.example/{TOKEN}\n")
    fmt = "" if "format" in body else '\nformat = "slack"'
    with pytest.raises(ConfigError, match=re.escape(named)):
        load(config(tmp_path, f'url_file = "{tmp_path}/ok.url"\n{body}{fmt}'))
