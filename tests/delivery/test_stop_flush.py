"""``stop_flush_seconds`` is honoured when a sink is slow to confirm (issue 18: 5 s was exceeded by
about 2 s, the pool's own stop grace after the drain). The agent runs in this process on the
FakeClock with a sink that takes 3 fake seconds to confirm each record, so a stop with records
waiting cannot finish sending within the budget; the time the stop takes is fake time, the same
at every run."""

from __future__ import annotations

import pytest
from helpers.agentrun import AgentRun
from helpers.scripted_sink import ScriptedSink

from se_forwarder.sinks.batching import BatchLimits
from se_forwarder_testbed.agentproc import write_config

VM = "vm-flush"
CONFIRM_SECONDS = 3.0
FLUSH_SECONDS = 5.0


@pytest.mark.e2e
def test_a_sink_slow_to_confirm_is_cut_short_at_stop_flush_seconds(simulator, clock, tmp_path):
    def slow(batch):  # the service answers, but only after CONFIRM_SECONDS
        clock.wait(clock.event(), CONFIRM_SECONDS)

    sink = ScriptedSink(
        default=slow, limits=BatchLimits(max_records=1, max_bytes=1_000_000, linger_seconds=0.0)
    )
    sim = simulator(vm_name=VM, clock=clock)
    config = write_config(
        tmp_path / "agent.toml", sim.url, tmp_path / "state", stop_flush_seconds=FLUSH_SECONDS
    )
    agent = AgentRun(config, clock, sinks=[sink])
    try:
        sim.set_events(
            [
                {
                    "EventId": f"F-{i}",
                    "EventType": "Reboot",
                    "Resources": [VM],
                    "NotBefore": clock.wall_seconds() + 600,
                }
                for i in range(3)
            ]
        )
        assert agent.wait_for(lambda a: len(a.messages("record")) == 3, 10)
        t0 = clock.monotonic()
        assert agent.stop() == 0
        took = clock.monotonic() - t0
        # three records and two heartbeats at 3 s each: more than the budget holds
        assert took <= FLUSH_SECONDS, f"the stop took {took:g} s of a {FLUSH_SECONDS:g} s budget"
        [busy] = agent.messages(
            "sink still sending at exit; its records stay in the outbox and "
            "are sent again at the next start"
        )
        assert busy["sinks"] == ["scripted"]
        assert agent.status_json()["spool_depth"] >= 1  # kept for the next start, not lost
    finally:
        clock.advance(2 * CONFIRM_SECONDS)  # the send under way ends; its worker then stops
        agent.agent.store.close()
    assert len(sink.delivered) < 5
