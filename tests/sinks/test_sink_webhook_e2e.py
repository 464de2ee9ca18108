"""The webhook sink in the running agent: records wait in the outbox through an outage of the
receiver and a ``kill -9`` of the agent, and every one of them arrives afterwards; the URL (a
secret) appears in no log line, no status file and no other output of the agent."""

from __future__ import annotations

import json
import time

import pytest

from se_forwarder_testbed.standins.webhooks import TOKEN, WebhookStandIn

pytestmark = [pytest.mark.e2e, pytest.mark.process]

NOT_BEFORE = time.time() + 3600


def event(i: int) -> dict:
    return {
        "EventId": f"00000000-0000-4000-8000-{i:012d}",
        "EventType": "Reboot",
        "ResourceType": "VirtualMachine",
        "Resources": ["vm-a"],
        "EventStatus": "Scheduled",
        "NotBefore": NOT_BEFORE,
        "Description": "host maintenance",
        "EventSource": "Platform",
        "DurationInSeconds": -1,
    }


def test_nothing_is_lost_across_an_outage_and_kill_9_and_the_url_stays_secret(
    simulator, agent_process, tmp_path
):
    with WebhookStandIn(tmp_path / "tls") as hooks:
        url_file = tmp_path / "webhook.url"
        url_file.write_text(hooks.url("json") + "\n")
        extra = (
            f'\n[sinks.webhook]\nurl_file = "{url_file}"\nformat = "json"\n'
            f'ca_file = "{hooks.ca_cert}"\n'
        )
        sim = simulator(vm_name="vm-a", first_call_delay=0.0)
        hooks.answer_all(503)  # the receiver is down
        first = agent_process(sim.url, extra=extra)
        for n in range(1, 6):
            sim.set_events([event(i) for i in range(n)])
            assert first.wait_for(lambda a, n=n: len(a.records()) >= n, 20)
        assert first.wait_for(lambda a: len(hooks.requests) >= 3, 20)  # it is retrying
        first.kill9()
        sim.set_events([event(i) for i in range(2, 7)])  # 0 and 1 removed, 5 and 6 new
        hooks.answer_all(None)
        second = agent_process(sim.url, extra=extra)
        assert second.wait_for(lambda a: len(a.records()) >= 4, 20)
        expected = {r["RecordId"] for r in first.records() + second.records()}
        assert len(expected) == 5 + 4  # 5 FirstSeen, then 2 Removed + 2 FirstSeen
        assert second.wait_for(
            lambda a: {b["RecordId"] for b in hooks.accepted("json")} >= expected, 30
        )
        assert second.stop() == 0
        status = (tmp_path / "agent-state" / "status.json").read_text()
        everything = "".join(first.raw + second.raw) + status
        assert TOKEN not in everything and "https://127.0.0.1/***" in everything
        assert json.loads(status)["sinks"]["webhook"]["spool_depth"] == 0
        assert not (tmp_path / "agent-state" / "dead-letter.jsonl").exists()
