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
    "EventId": "4f2a9c1e-5b6d-4e8f-9a0b-1c2d3e4f5a6b",
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
        "Reboot 4f2a9c1e on vm-a: announced · Scheduled · from User · this VM · not before "
        "2026-01-01 00:14:30 UTC, in 14m30s · expected impact: unknown · policy: will approve "
        'it now (rule 1 "microsoft: user-initiated")'
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
            "Reboot 4f2a9c1e on vm-a: started 10m00s early · Started",
        ),
        (
            {
                "Phase": "Removed",
                "Outcome": "Cancelled",
                "AffectsThisVm": False,
                "Resources": ["vm-b"],
            },
            "Reboot 4f2a9c1e on vm-a: ended (Cancelled) · from User · other VMs: vm-b · "
            "never seen started",
        ),
        (
            {"Phase": "Approved", "DurationInSeconds": 5, "EventType": "Freeze"},
            (
                "Freeze 4f2a9c1e on vm-a: approved by this VM (it may start early) · Scheduled · "
                "from User · this VM · not before 2026-01-01 00:14:30 UTC, in 14m30s · "
                "expected impact 5s · policy: approved"
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
    # the default of affects_this_vm, said as README and docs/policy.md say it
    assert (
        "webhook (slack): every event this VM sees, its own and other VMs' "
        "(affects_this_vm absent); every phase; every type; notices too"
    ) in r.stderr


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
    assert "policy: will run drain, then approve it; will run undrain when it ends (rule 1)" in (
        first
    )
    assert started == (
        "Reboot 4f2a9c1e on vm-a: started 5m00s early · Started · from User · this VM · "
        "expected impact: unknown"
    )


def test_in_a_dry_run_every_line_says_would(hooks):
    policy = Policy(PolicyConfig.model_validate({**DRAIN, "dry_run": True}))
    s = sink(hooks, policy=policy)
    s.send([row()])
    s.send([row(Phase="Removed", Outcome="Completed", EventStatus="Started")])
    first, ended = [b["text"] for b in hooks.accepted("slack")[-2:]]
    assert (
        "policy: would run drain, then approve it; would run undrain when it ends (rule 1, dry run)"
    ) in first
    assert ended.endswith("policy: undrain not run: no hook before it ran (rule 1)")


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
                "Reboot 4f2a9c1e on vm-a: hook drain failed (exit 3) · Scheduled · this VM · "
                "not before 2026-01-01 00:14:30 UTC, in 13m30s · policy: not approved: it "
                "starts at NotBefore"
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
            "Reboot 4f2a9c1e on vm-a: hook after it undrain timed out after 600 s · Scheduled",
        ),
        (
            "ApprovalGivenUp",
            {"reason": "refused: HTTP 400", "consequence": "it starts at NotBefore"},
            "Reboot 4f2a9c1e on vm-a: approval given up (refused: HTTP 400) · Scheduled",
        ),
        (
            "StartedBeforeHooks",
            {"hook": "drain", "hook_phase": "pre", "reason": "hook drain was still running"},
            "Reboot 4f2a9c1e on vm-a: started while hook drain was still running · Scheduled",
        ),
    ],
)
def test_notices_are_one_readable_line_and_json_gets_them_as_they_are(hooks, kind, over, words):
    sink(hooks, phases=["Removed"]).send([notice(kind, **over)])  # phases never hide a notice
    assert words in hooks.accepted("slack")[-1]["text"]
    sink(hooks, "json").send([notice(kind, **over)])
    got = hooks.accepted("json")[-1]
    assert got["Notice"] == kind and got["EventId"] == REC["EventId"] and got["VmName"] == "vm-a"


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
        "<!here> *vm-a*: Reboot announced (not before 2026-01-01 00:14:30 UTC, in 14m30s) "
        "$5 · &lt;!channel&gt; &amp; &lt;https://evil.example|click&gt;"
    )
    sink(hooks, "teams", template="$Text").send([row()])
    teams = hooks.accepted("teams")[-1]["attachments"][0]["content"]["body"][0]["text"]
    assert teams.startswith("Reboot 4f2a9c1e on vm-a: announced · Scheduled")


@pytest.mark.parametrize(
    "body,named",
    [
        ('template = "$VmName ${Nope} $Other"', "unknown field(s) Nope, Other"),
        ('template = "costs $ 5"', "a '$' must start a field"),
        ('template = "{{__import__}}"\nformat = "json"', "with format json it must be a JSON"),
        ('template = \'{"id": $EventId}\'\nformat = "json"', "with format json it must be"),
        ('templates = { Nope = "x" }', "unknown message kind(s) Nope"),
        ('templates = { Removed = "$Took" }', "unknown field(s) Took"),
    ],
)
def test_a_bad_template_is_refused_when_the_config_is_loaded(tmp_path, body, named):
    (tmp_path / "ok.url").write_text(f"https://hooks.example/{TOKEN}\n")
    fmt = "" if "format" in body else '\nformat = "slack"'
    with pytest.raises(ConfigError, match=re.escape(named)):
        load(config(tmp_path, f'url_file = "{tmp_path}/ok.url"\n{body}{fmt}'))


# -- messages that identify their event (issue 32) ------------------------------------------------


def test_three_overlapping_reboots_of_one_vm_read_apart_and_ended_ones_say_how_long(hooks):
    s = sink(hooks)
    ids = [f"{n}1b2c3d4-0000-4000-8000-00000000000{n}" for n in (1, 2, 3)]
    for n, eid in enumerate(ids):
        s.send(
            [
                row(
                    Phase="Removed",
                    EventId=eid,
                    Outcome="Completed",
                    EventStatus="Started",
                    NotBefore=None,
                    SinceStartedSeconds=60.0 * (n + 1),
                )
            ]
        )
    texts = [b["text"] for b in hooks.accepted("slack")[-3:]]
    assert [t.split(":")[0] for t in texts] == [
        "Reboot 11b2c3d4 on vm-a",
        "Reboot 21b2c3d4 on vm-a",
        "Reboot 31b2c3d4 on vm-a",
    ]
    assert [t.split(" · ")[3] for t in texts] == [
        "took 1m00s from its start",
        "took 2m00s from its start",
        "took 3m00s from its start",
    ]
    assert not any("not before" in t or "NotBefore" in t for t in texts)  # no countdown


def test_a_cancelled_redeploy_has_no_countdown(hooks):
    sink(hooks).send(
        [
            row(
                Phase="Removed",
                EventType="Redeploy",
                Outcome="Cancelled",
                TimeGenerated=REC["TimeGenerated"],
            )
        ]
    )
    text = hooks.accepted("slack")[-1]["text"]
    assert text.startswith("Redeploy 4f2a9c1e on vm-a: ended (Cancelled) · from User")
    assert "never seen started" in text and " in 14m30s" not in text


@pytest.mark.parametrize(
    "tags,pool,scale_set,group,named",
    [
        ({"Service": "web"}, "np1", "vmss-1", "rg-1", "on vm-a (service web)"),  # its tag, any case
        ({"env": "prod"}, "np1", "vmss-1", "rg-1", "on vm-a (service aks-1/np1)"),  # its pool
        ({"env": "prod"}, None, "vmss-1", "rg-1", "on vm-a (service vmss-1)"),  # its scale set
        (None, None, None, "rg-1", "on vm-a (service rg-1)"),  # else its resource group
        (None, None, None, None, "on vm-a: "),
    ],
)
def test_every_message_names_the_vms_service(hooks, tags, pool, scale_set, group, named):
    kube = {"NodePool": pool, "Cluster": "aks-1"} if pool else {}
    sink(hooks).send([row(Tags=tags, ScaleSetName=scale_set, ResourceGroup=group, **kube)])
    assert named in hooks.accepted("slack")[-1]["text"]


def test_who_let_an_event_start_is_said_when_it_starts(hooks):
    started = {"Phase": "Started", "EventStatus": "Started", "NotBefore": None}
    sink(hooks).send([row(**started, ApprovedBy="AzurePolicy", StartDelaySeconds=None)])
    text = hooks.accepted("slack")[-1]["text"]
    assert text.startswith(
        "Reboot 4f2a9c1e on vm-a: started, approved by Azure's own policy "
        "(automaticallyApprove), not by us · Started"
    )


def test_teams_shows_markdown_from_an_event_as_written(hooks):
    """A Description from IMDS with a link and bold text: Teams renders the card's TextBlock as
    Markdown (CommonMark's rules), so the values are escaped as Slack's are, and the text,
    rendered, holds no link, no emphasis, no list: only the characters as served."""
    from markdown_it import MarkdownIt

    hostile = "**urgent** [click](https://evil.example) <https://x.example> _now_ `code` # h"
    sink(hooks, "teams", template="$Description").send([row(Description=hostile)])
    sink(hooks, "teams", template="$Description").send([row(Description="- 1. listed")])
    bodies = hooks.accepted("teams")[-2:]
    texts = [b["attachments"][0]["content"]["body"][0]["text"] for b in bodies]
    md = MarkdownIt("commonmark")
    html = md.render(texts[0])
    assert "<strong>" not in html and "<em>" not in html and "<a " not in html
    assert "<code>" not in html and "<h1>" not in html
    assert md.renderInline(texts[0]).replace("&lt;", "<").replace("&gt;", ">") == hostile
    assert md.render(texts[1]) == "<p>- 1. listed</p>\n"  # not a list
    plain = md.render(hostile)  # the same text unescaped would have rendered as markup
    assert "<strong>" in plain and "<a " in plain


def test_a_json_template_makes_the_document_a_receiver_wants_values_always_json(hooks):
    tpl = '{"summary": "$Event: $What", "id": "$EventId", "text": "$Text", "d": "$Description"}'
    s = sink(hooks, "json", template=tpl)
    s.send([row(Description='quote " backslash \\ newline\nend')])
    got = hooks.accepted("json")[-1]
    assert got["summary"] == "Reboot 4f2a9c1e on vm-a: announced"
    assert got["id"] == REC["EventId"] and got["d"] == 'quote " backslash \\ newline end'
    assert got["text"].startswith("Reboot 4f2a9c1e on vm-a: announced · Scheduled")


def test_templates_per_message_kind_and_the_rest_take_the_template_or_the_line(hooks):
    s = sink(
        hooks,
        template="$Event $Phase",
        templates={"Removed": "$Event is over ($When)", "HookFailed": "<!here> $What"},
    )
    s.send([row()])
    s.send([row(Phase="Removed", Outcome="Completed", NotBefore=None, SinceStartedSeconds=7.0)])
    s.send([notice("HookFailed", hook="drain", hook_phase="pre", reason="failed (exit 3)")])
    texts = [b["text"] for b in hooks.accepted("slack")[-3:]]
    assert texts == [
        "Reboot 4f2a9c1e on vm-a FirstSeen",
        "Reboot 4f2a9c1e on vm-a is over (took 7s from its start)",
        "<!here> hook drain failed (exit 3)",
    ]


def test_webhook_templates_per_kind_are_read_from_the_config(tmp_path):
    (tmp_path / "ok.url").write_text(f"https://hooks.example/{TOKEN}\n")
    cfg = load(
        config(
            tmp_path,
            f'url_file = "{tmp_path}/ok.url"\nformat = "json"\n'
            'templates = { Removed = \'{"text": "$Event ended: $When"}\' }',
        )
    )
    assert cfg.sinks.webhook.templates == {"Removed": '{"text": "$Event ended: $When"}'}
