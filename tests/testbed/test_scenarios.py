"""The scenario timeline as a pure function: lifecycle order holds for any valid event."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from se_forwarder_testbed.simulator.scenario import EventSpec, Timeline, load_scenario


@st.composite
def event_specs(draw) -> EventSpec:
    appear = draw(st.integers(0, 100))
    started = draw(st.booleans())
    data: dict = {
        "type": "Reboot",
        "resources": ["$vm", "other"],
        "appear": appear,
        "started": started,
        "approval_delay": draw(st.integers(0, 50)),
        "start_on_approval": draw(st.booleans()),
    }
    if not started:
        nb = appear + draw(st.integers(0, 300))
        data["not_before"] = nb
        if draw(st.booleans()):
            data["start"] = nb + draw(st.integers(0, 20))
        at = appear
        resched = []
        for _ in range(draw(st.integers(0, 2))):
            at += draw(st.integers(1, 100))
            resched.append({"at": at, "not_before": at + draw(st.integers(1, 300))})
        data["reschedule"] = resched
    if draw(st.booleans()):
        data["remove"] = appear + draw(st.integers(1, 800))
    if draw(st.booleans()):
        data["remove_after_start"] = draw(st.integers(0, 300))
    return EventSpec.model_validate(data)


@settings(max_examples=300, deadline=None)
@given(spec=event_specs(), approved=st.none() | st.integers(0, 900))
def test_lifecycle_order_and_not_before_rule(spec: EventSpec, approved: int | None) -> None:
    tl = Timeline(spec, "id-1", "me")
    if approved is not None and approved < spec.appear:
        approved = None
    seen = []
    last_not_before = None
    for t in range(1200):
        state = tl.state_at(float(t), approved)
        phase = "gone" if state is None else state.status
        if not seen or seen[-1] != phase:
            seen.append(phase)
        if state is None:
            continue
        assert state.event_id == "id-1" and state.resources == ("me", "other")
        if state.status == "Scheduled":
            assert state.not_before is not None
            last_not_before = state.not_before
        else:
            assert state.not_before is None
            early = approved is not None and spec.start_on_approval
            if last_not_before is not None and not early:
                assert t >= last_not_before  # never before NotBefore unless approved
    allowed = (
        ["gone", "Scheduled", "Started", "gone"],
        ["gone", "Scheduled", "gone"],
        ["gone", "Started", "gone"],
        ["Scheduled", "Started", "gone"],
        ["Scheduled", "gone"],
        ["Started", "gone"],
    )
    # prefixes are fine: an event may never be removed
    assert any(seen == a[: len(seen)] for a in allowed), seen
    if spec.started:
        assert "Scheduled" not in seen
    # every visible change happens at a time change_times() announces
    times = set(tl.change_times({"id-1": approved} if approved is not None else {}))
    prev = tl.state_at(0.0, approved)
    for t in range(1, 1200):
        cur = tl.state_at(float(t), approved)
        if cur != prev:
            assert any(t - 1 < x <= t for x in times), (t, sorted(times))
        prev = cur


def test_reschedule_moves_the_start_and_keeps_the_id():
    tl = Timeline(load_scenario("reschedule").events[0], "R", "vm")
    before = tl.state_at(299.0, None)
    after = tl.state_at(300.0, None)
    assert (before.not_before, before.duration) == (905, 10)
    assert (after.not_before, after.duration, after.status) == (1505, 20, "Scheduled")
    assert tl.state_at(1000.0, None).status == "Scheduled"  # the old NotBefore passed unused
    assert tl.state_at(1505.0, None).status == "Started"
    assert tl.state_at(1805.0, None) is None
    assert {tl.state_at(float(t), None).event_id for t in (10, 400, 1600)} == {"R"}


def test_approval_hastens_only_when_allowed():
    spec = load_scenario("user-reboot-approved").events[0]
    tl = Timeline(spec, "U", "vm")
    assert tl.start_time(None) == 905
    assert tl.start_time(100.0) == 110  # approval_delay 10
    assert tl.remove_time(110.0) == 230  # remove_after_start follows the real start
    cancelled = Timeline(load_scenario("cancelled").events[0], "C", "vm")
    assert cancelled.start_time(10.0) == 905  # start_on_approval = false
    assert cancelled.state_at(304.0, 10.0).status == "Scheduled"
    assert cancelled.state_at(305.0, 10.0) is None


def test_a_reschedule_due_after_an_approved_start_is_void():
    spec = EventSpec.model_validate(
        {
            "type": "Freeze",
            "resources": ["$vm"],
            "appear": 0,
            "not_before": 100,
            "duration": 5,
            "approval_delay": 5,
            "reschedule": [{"at": 50, "not_before": 200, "duration": 9}],
        }
    )
    tl = Timeline(spec, "F", "vm")
    assert tl.start_time(10.0) == 15
    assert tl.state_at(60.0, 10.0).duration == 5  # started at 15 with the first schedule
    assert 50 not in tl.change_times({"F": 10.0})
    assert tl.state_at(60.0, None).not_before == 200  # unapproved, it was re-scheduled
