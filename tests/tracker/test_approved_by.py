"""Who let an event start (``ApprovedBy``, issue 32) and what the policy did for it (``Acted``):
decided by the pure tracker from what it saw, kept in its state across a restart."""

from __future__ import annotations

import pytest
from test_tracker import T0, VM, S, doc, ev, run

from se_forwarder import tracker
from se_forwarder.model import ApprovedBy

NB = "Fri, 01 Mar 2024 10:15:00 GMT"  # T0 + 900 s
STARTED = {"status": "Started", "nb": ""}


def by_phase(records):
    return {r.Phase: r.ApprovedBy for r in records}


@pytest.mark.parametrize(
    "etype,source,expected",
    [
        ("Reboot", "User", ApprovedBy.AZURE_POLICY),  # userInitiatedReboot automaticallyApprove
        ("Redeploy", "User", ApprovedBy.AZURE_POLICY),  # userInitiatedRedeploy
        ("Reboot", "Platform", ApprovedBy.NO_NOTICE),  # a hardware failure: nobody approved it
        ("Freeze", "User", ApprovedBy.NO_NOTICE),
    ],
)
def test_first_seen_started_while_watching(etype, source, expected):
    _, records = run(
        [
            (0, doc(1)),
            (1, doc(2, ev(etype=etype, EventSource=source, **STARTED))),
            (9, doc(3)),
        ]
    )
    assert by_phase(records) == {"FirstSeen": None, "Started": expected, "Removed": expected}


def test_first_seen_started_at_the_agents_first_poll_is_not_known():
    """The agent was not watching: a Scheduled may have come and gone unseen."""
    _, records = run([(0, doc(2, ev(etype="Reboot", EventSource="User", **STARTED)))])
    assert by_phase(records) == {"FirstSeen": None, "Started": None}


def test_started_early_without_this_vms_approval_was_approved_elsewhere():
    _, records = run([(0, doc(1, ev(nb=NB))), (100, doc(2, ev(**STARTED))), (200, doc(3))])
    assert by_phase(records) == {
        "FirstSeen": None,
        "Started": ApprovedBy.ELSEWHERE,
        "Removed": ApprovedBy.ELSEWHERE,
    }


def test_started_at_not_before_was_approved_by_nobody():
    steps = [(0, doc(1, ev(nb=NB)))] + [(s, doc(1, ev(nb=NB))) for s in range(890, 901)]
    _, records = run([*steps, (901, doc(2, ev(**STARTED)))])
    assert by_phase(records)["Started"] == ApprovedBy.AT_NOT_BEFORE


def test_started_after_a_long_gap_across_not_before_is_not_known():
    _, records = run([(0, doc(1, ev(nb=NB))), (1000, doc(2, ev(**STARTED)))])
    assert by_phase(records)["Started"] is None


def test_approved_by_this_vm_and_what_the_policy_did_ride_on_the_later_records():
    state, _ = run([(0, doc(1, ev(nb=NB)))])
    state = tracker.acted(state, "e1", 'rule 1 "drain": drain ok')
    obs = tracker.approved(state, T0 + 10 * S, ["e1"], VM)
    [approved] = obs.records
    assert (approved.ApprovedBy, approved.Acted) == (ApprovedBy.THIS_VM, 'rule 1 "drain": drain ok')
    # kept across a restart (the state's persistence form)
    state = tracker.state_from_json(tracker.state_to_json(obs.state))
    _, later = run([(20, doc(2, ev(**STARTED))), (30, doc(3))], state)
    assert [(r.Phase, r.ApprovedBy, r.Acted) for r in later] == [
        ("Started", ApprovedBy.THIS_VM, 'rule 1 "drain": drain ok'),
        ("Removed", ApprovedBy.THIS_VM, 'rule 1 "drain": drain ok'),
    ]
    assert later[0].as_dict()["ApprovedBy"] == "ThisVm"


def test_a_state_saved_before_these_were_kept_still_reads():
    state, _ = run([(0, doc(1, ev(nb=NB)))])
    saved = tracker.state_to_json(state)
    saved["events"] = [e[:7] for e in saved["events"]]
    te = tracker.state_from_json(saved).events["e1"]
    assert (te.approved_by, te.acted) == (None, None)


def test_started_at_not_before_on_a_vm_whose_clock_is_behind_azures_was_approved_by_nobody():
    """The VM's clock 6 s behind Azure's (its IMDS's Date says so): the event started at
    NotBefore by Azure's clock reads 6 s early on the VM's; NotBefore is compared on Azure's clock
    (found by the service's chaos scenario, se_forwarder_testbed.spread: "Elsewhere")."""
    state = tracker.TrackerState()
    steps = [(0, doc(1, ev(nb=NB)))] + [(s, doc(1, ev(nb=NB))) for s in range(885, 895)]
    records = []
    for sec, d in [*steps, (895, doc(2, ev(**STARTED)))]:
        obs = tracker.observe(state, T0 + sec * S, d, VM, azure_offset_ms=6 * S)
        state, records = obs.state, records + obs.records
    assert by_phase(records)["Started"] == ApprovedBy.AT_NOT_BEFORE
