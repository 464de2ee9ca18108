"""A hook's secrets through ``se-forwarder run`` (issue 33): a token from a systemd credential
($CREDENTIALS_DIRECTORY, as the unit's LoadCredential= hands it over) and a key from a file
only the agent's user can read reach the hook; what the hook prints of them is masked in the
log, and neither reaches the records, the heartbeats nor status.json. A file that became
readable by others before the next hook's run is refused in one line, counted (status,
heartbeat's HooksFailed), and that hook is not run."""

from __future__ import annotations

import json

import pytest
from helpers.actions import SPEED, hook, policy, runs, scenario

pytestmark = [pytest.mark.e2e, pytest.mark.process]

TOKEN = "xoxb-9f2e4c1a7b3d5e6f"
API_KEY = "k3y-0b1c2d3e4f5a6b7c"


def test_a_hooks_secrets_reach_it_and_no_output_of_the_agent(simulator, agent_process, tmp_path):
    creds = tmp_path / "credentials"
    creds.mkdir(mode=0o700)
    (creds / "teams-token").write_text(TOKEN + "\n")
    env_file = tmp_path / "hook.env"
    env_file.write_text(f"API_KEY={API_KEY}\n")
    env_file.chmod(0o600)
    got = tmp_path / "got"
    notify = hook(
        tmp_path,
        "notify",
        f'echo "$TEAMS_TOKEN $API_KEY" > {got}\n'
        'echo "posting with $TEAMS_TOKEN and key=$API_KEY"\n'
        'echo "$API_KEY" | base64\n',
    )
    loosen = hook(tmp_path, "loosen", f"chmod 0644 {env_file}\n")
    again = hook(tmp_path, "again", "exit 0\n")
    secret_env = {"env_credentials": {"TEAMS_TOKEN": "teams-token"}, "env_file": str(env_file)}
    extra = policy(
        {
            "notify": {"command": [str(notify)], **secret_env},
            "loosen": {"command": [str(loosen)]},
            "again": {"command": [str(again)], "env_file": str(env_file)},
        },
        [{"pre_hooks": ["notify", "loosen", "again"]}],
    )
    sim = simulator(scenario(), speed=SPEED, first_call_delay=0.0)
    records, beats = tmp_path / "agent-records.jsonl", tmp_path / "agent-heartbeats.jsonl"
    agent = agent_process(
        sim.url,
        file_sink=records,
        extra=f'heartbeat_path = "{beats}"\n' + extra,
        env={"CREDENTIALS_DIRECTORY": str(creds)},
    )
    refused = agent.wait_log("hook not run: its secret environment was refused", 60)
    assert agent.stop() == 0
    assert got.read_text().split() == [TOKEN, API_KEY]  # the hook was given both
    assert runs(tmp_path, "again") == []  # refused: never started
    assert (
        refused["hook"] == "again"
        and f"env_file {env_file}: refused: mode 0644" in (refused["error"])
    )
    output = [m["line"] for m in agent.messages("hook output")]
    assert output[0] == "posting with *** and key=***", output
    # the key in base64 (``base64`` adds the line break: only the last bytes' group shows)
    assert output[1].startswith("***") and len(output[1]) <= 3 + 4, output
    status = json.loads((tmp_path / "agent-state" / "status.json").read_text())
    assert (status["hooks_succeeded"], status["hooks_failed"]) == (2, 1)
    assert status["hook_secrets_refused"] == 1
    beat = json.loads(beats.read_text().splitlines()[-1])
    assert beat["HooksFailed"] == 1
    assert [json.loads(x)["Phase"] for x in records.read_text().splitlines()][:1] == ["FirstSeen"]
    for where, text in [
        ("log", "".join(agent.raw)),
        ("records", records.read_text()),
        ("heartbeats", beats.read_text()),
        ("status.json", json.dumps(status)),
    ]:
        assert TOKEN not in text and API_KEY not in text, where
