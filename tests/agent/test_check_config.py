"""``check-config`` runs the very validation ``run`` runs, sink rules included: what it accepts,
``run`` can build; what it refuses, it refuses with one line naming the key, exit 2, and never
prints a secret."""

from __future__ import annotations

import subprocess
import sys

import pytest

from se_forwarder.config import load
from se_forwarder.sinks import registry

CONN = ("Endpoint=sb://ns1.servicebus.windows.net/;SharedAccessKeyName=send;"
        "SharedAccessKey=c2VjcmV0LWtleS12YWx1ZQ==")
SECRET = "c2VjcmV0LWtleS12YWx1ZQ=="


def check_config(path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "se_forwarder.cli", "check-config", "--config",
                           str(path)], capture_output=True, text=True, timeout=60, check=False,
                          env={"PATH": "/usr/bin:/bin", "EH_CONN": CONN})


def event_hubs(tmp_path, **keys) -> str:
    (tmp_path / "eh.conn").write_text(CONN)
    (tmp_path / "bad.conn").write_text("this is not a connection string")
    (tmp_path / "empty.conn").write_text("\n")
    body = "\n".join(f'{k} = "{v}"' for k, v in keys.items())
    return f'[sinks.event_hubs]\nhub = "scheduled-events"\n{body}\n'


CASES = [  # (keys, accepted, what the refusal names)
    ({"namespace": "ns1.servicebus.windows.net"}, True, None),
    ({"connection_string_file": "{d}/eh.conn"}, True, None),
    ({"connection_string_env": "EH_CONN"}, True, None),
    ({}, False, "set namespace"),
    ({"connection_string_env": "NOT_SET_ANYWHERE"}, False, "NOT_SET_ANYWHERE is not set"),
    ({"connection_string_file": "{d}/nope.conn"}, False, "cannot read"),
    ({"connection_string_file": "{d}/empty.conn"}, False, "is empty"),
    ({"connection_string_file": "{d}/bad.conn"}, False, "connection string is malformed"),
    ({"namespace": CONN}, False, "looks like a connection string"),
]


@pytest.mark.parametrize("keys,accepted,named", CASES, ids=[str(i) for i in range(len(CASES))])
def test_check_config_and_run_agree_on_event_hubs(tmp_path, monkeypatch, keys, accepted, named):
    keys = {k: v.format(d=tmp_path) for k, v in keys.items()}
    path = tmp_path / "config.toml"
    path.write_text(event_hubs(tmp_path, **keys))
    r = check_config(path)
    assert SECRET not in r.stdout + r.stderr
    if accepted:
        assert r.returncode == 0, r.stderr
        monkeypatch.setenv("EH_CONN", CONN)
        [sink] = registry.build(load(path))  # what check-config accepts, run can build
        sink.close()
    else:
        assert r.returncode == 2 and "sinks.event_hubs" in r.stderr and named in r.stderr, r.stderr
        assert r.stdout == "" and len(r.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("section,named", [
    (('[sinks.log_analytics]\nendpoint = "https://x.ingest.monitor.azure.com"\n'
     'dcr_immutable_id = "my-rule"\n'), "dcr_immutable_id"),
    (('[sinks.log_analytics]\nendpoint = "https://x.ingest.monitor.azure.com"\n'
     'dcr_immutable_id = "dcr-1"\nrecords_stream = "ScheduledEvents"\n'), "records_stream"),
    ('[sinks.file]\npath = "/tmp/r.jsonl"\nmax_bytes = 10\n', "sinks.file.max_bytes"),
    ('[sinks.stdout]\nheartbeat = true\n', "sinks.stdout.heartbeat: unknown key"),
])
def test_every_sink_section_is_validated_by_check_config(tmp_path, section, named):
    path = tmp_path / "config.toml"
    path.write_text(section)
    r = check_config(path)
    assert r.returncode == 2 and named in r.stderr, r.stderr
