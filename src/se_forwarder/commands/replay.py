"""``se-forwarder replay``: a trace through the agent's own tracker and persistence."""

from __future__ import annotations

import argparse
import sys
import tempfile
from typing import TextIO

from .. import logs, tracefile
from ..errors import TraceError
from ..model import LifecycleRecord, VmIdentity
from ..outbox import Store
from ..recording.recorder import Recorder, body_key
from .args import directory


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "trace", metavar="TRACE", help="trace file (JSON Lines, record-contract.md §1)"
    )
    parser.add_argument("--vm-name", metavar="NAME", help="this VM's name (decides AffectsThisVm)")
    parser.add_argument(
        "--state-dir",
        metavar="DIR",
        type=directory,
        help="keep state here (default: a fresh temporary directory every run)",
    )
    parser.add_argument("--log-format", choices=("json", "text"), default="json")


def run(args: argparse.Namespace) -> int:
    logs.setup(args.log_format, "warning")
    try:
        lines = tracefile.read(args.trace)
    except TraceError as exc:
        print(exc, file=sys.stderr)
        return 2
    if args.state_dir:
        return replay(lines, args.state_dir, args.vm_name, sys.stdout)
    with tempfile.TemporaryDirectory(prefix="se-forwarder-replay-") as tmp:
        return replay(lines, tmp, args.vm_name, sys.stdout)


def replay(lines: list[tracefile.Line], state_dir: str, vm_name: str | None, out: TextIO) -> int:
    vm = VmIdentity(VmName=vm_name)
    write = out.write

    def emit(records: list[LifecycleRecord]) -> None:
        for r in records:
            write(r.to_json())
            write("\n")

    def open_recorder() -> Recorder:
        return Recorder(Store(state_dir, durable=False), vm, on_records=emit, shared=False)

    rec = open_recorder()
    running = True
    # tracefile.read hands out one decoded body for a run of identical lines, and nothing mutates
    # it: its comparison key is computed once per run, not per line (bench/replay_rate.py).
    last_body: object = None
    last_key = body_key(None, True)
    for line in lines:
        kind = line.kind
        if kind == "answer":
            assert line.status is not None  # tracefile.read: every answer has its status
            if line.body is not last_body:
                last_body, last_key = line.body, body_key(line.body, True)
            rec.answer(line.at_ms, line.status, line.body, parsed=True, key=last_key)
        elif kind == "text":
            assert line.status is not None
            rec.answer(line.at_ms, line.status, line.body)
        elif kind == "error":
            rec.bad(line.at_ms, line.body)
        elif kind == "stop":
            rec.checkpoint()
            rec.store.close()
            running = False
        else:  # start: state comes back from disk, as in production
            rec = open_recorder()
            running = True
    if running:  # a trace may end with the agent stopped: its state is already saved
        rec.checkpoint()
        rec.store.close()
    out.flush()
    return 0
