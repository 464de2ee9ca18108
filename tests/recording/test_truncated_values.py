"""``truncated_values`` (status.json, the heartbeat's ``TruncatedValues``) counts values cut to the
per-value limit, as its name and the contract say: each value once, however many documents serve
it again, and one log line per document that brings new ones (issue 18: bad input gets one
readable log line and a counter). Real parsing (imds/parse.py) into the real counter."""

from __future__ import annotations

import copy
import logging
from dataclasses import dataclass

from se_forwarder.imds.parse import MAX_VALUE_BYTES, parse_json
from se_forwarder.recording.doc_problems import DocumentProblems

HUGE = "x" * (MAX_VALUE_BYTES + 10)
EVENT = {
    "EventId": "C7061BAC-AFDC-4513-B24B-AA5F13A16123",
    "EventStatus": "Scheduled",
    "EventType": "Freeze",
    "ResourceType": "VirtualMachine",
    "Resources": ["vm-a"],
    "NotBefore": "Mon, 11 Apr 2022 22:26:58 GMT",
    "Description": HUGE,
    "EventSource": "Platform",
    "DurationInSeconds": 5,
}
OTHER = {**EVENT, "EventId": "0b8b3c8e-7777-4a4a-9c9c-0000000000ff", "Description": "short"}


@dataclass
class Counts:
    malformed_events: int = 0
    truncated_values: int = 0


def served(problems: DocumentProblems, incarnation: int, *events: dict) -> None:
    problems.served(
        parse_json(
            {"DocumentIncarnation": incarnation, "Events": [copy.deepcopy(e) for e in events]}
        )
    )


def test_a_value_served_again_in_later_documents_is_counted_and_logged_once(caplog):
    caplog.set_level(logging.WARNING)
    counts = Counts()
    problems = DocumentProblems(counts, logging.getLogger("test.truncated"))
    served(problems, 1, EVENT)
    served(problems, 2, EVENT, OTHER)  # a new document, the same value: not a new one
    served(problems, 3, {**EVENT, "EventStatus": "Started"}, OTHER)
    assert counts.truncated_values == 1
    # a second value of the same event, and the first one changed: two more values
    served(problems, 4, {**EVENT, "Description": HUGE + "y", "EventSource": HUGE}, OTHER)
    assert counts.truncated_values == 3
    lines = [
        r for r in caplog.records if r.getMessage() == "values over the size limit were truncated"
    ]
    assert len(lines) == 2  # the documents that brought new ones
    assert [r.fields["values"] for r in lines] == [1, 2]


def test_a_resources_list_is_one_value_even_when_a_name_in_it_is_cut():
    counts = Counts()
    problems = DocumentProblems(counts, logging.getLogger("test.truncated"))
    served(problems, 1, {**EVENT, "Description": "short", "Resources": [HUGE, "vm-b"]})
    assert counts.truncated_values == 1
