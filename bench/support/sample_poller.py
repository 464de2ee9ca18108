"""Microsoft's sample Scheduled Events poller (the Python sample of the Scheduled Events docs),
written fresh for the benchmark: the same ``requests.get`` per poll (no session, so a new
connection each time), the same ``resp.json()`` and the same per-event decisions, looping on
``sleep(interval)`` instead of the sample's fixed ``sleep(1)``.

    python sample_poller.py http://127.0.0.1:PORT [--interval 1.0]

Runs until SIGTERM or SIGINT.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
from time import sleep

import requests

header = {"Metadata": "true"}  # IMDS ignores requests without it
query_params = {"api-version": "2020-07-01"}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("endpoint")
    parser.add_argument("--interval", type=float, default=1.0)
    args = parser.parse_args()
    metadata_url = args.endpoint.rstrip("/") + "/metadata/scheduledevents"

    def get_scheduled_events() -> dict:
        resp = requests.get(metadata_url, headers=header, params=query_params)
        return resp.json()

    def confirm_scheduled_event(event_id: str) -> int:
        body = json.dumps({"StartRequests": [{"EventId": event_id}]})
        return requests.post(
            metadata_url, headers=header, params=query_params, data=body
        ).status_code

    def log(event: dict) -> None:
        print(event["Description"], flush=True)

    def handle(document: dict) -> None:
        for event in document["Events"]:
            if event["EventStatus"] == "Started":
                log(event)
            elif event["EventSource"] == "User":  # noqa: SIM114 - as the sample has it
                confirm_scheduled_event(event["EventId"])
            elif event["EventType"] == "Freeze" and 0 <= int(event["DurationInSeconds"]) < 9:
                confirm_scheduled_event(event["EventId"])
            else:
                log(event)
        print("Processed events from document: " + str(document["DocumentIncarnation"]), flush=True)

    running = True

    def on_signal(_signum, _frame) -> None:
        nonlocal running
        running = False

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    last_incarnation = "-1"
    while running:
        sleep(args.interval)
        try:
            document = get_scheduled_events()
        except requests.RequestException as exc:
            print(f"poll failed: {exc}", file=sys.stderr, flush=True)
            continue
        if document["DocumentIncarnation"] != last_incarnation:
            handle(document)
            last_incarnation = document["DocumentIncarnation"]
    return 0


if __name__ == "__main__":
    sys.exit(main())
