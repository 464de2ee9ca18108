"""A hook's secrets (issue 33): from a systemd credential or from a file only root or the agent's
user can read, opened without following a link; a link, a mode for the group or others, another
owner, a hard link are refused with one line that never quotes a value; every value read is
masked wherever it shows, a hook printing it included (upper-cased, percent-encoded, in base64,
across the pieces a long line is logged in)."""

from __future__ import annotations

import base64
import json
import logging
import os
from pathlib import Path

import pytest
from pydantic import ValidationError
from test_hook_runner import go, script

from se_forwarder import redact
from se_forwarder.hooks.runner import MAX_LINE_BYTES
from se_forwarder.policy.config import HookConfig
from se_forwarder.secret_source import CREDENTIALS_DIRECTORY, hook_environment, read_env_file

TOKEN = "tEaMs-ToKeN-4f9a1c07d2"  # what a Teams or Slack token could be
API_KEY = "api-key-77e0b4a5c3d1"
OTHER_UID = 4242


def env_file(tmp_path: Path, text: str, mode: int = 0o600, name: str = "hook.env") -> Path:
    path = tmp_path / name
    path.write_text(text)
    path.chmod(mode)
    return path


def test_a_private_env_file_is_read_and_its_values_are_masked_from_then_on(tmp_path):
    path = env_file(
        tmp_path,
        f"# the drain script's key\nAPI_KEY={API_KEY}\nexport TEAMS='{TOKEN}'\n\nEMPTY=\n",
    )
    assert read_env_file(path) == {"API_KEY": API_KEY, "TEAMS": TOKEN, "EMPTY": ""}
    assert hook_environment(path, {}) == {"API_KEY": API_KEY, "TEAMS": TOKEN, "EMPTY": ""}
    shown = redact.text(f"got {API_KEY} and {TOKEN.upper()}")
    assert API_KEY not in shown and TOKEN.upper() not in shown and shown.count("***") == 2


@pytest.mark.parametrize(
    "plant,why",
    [
        ("symlink", "a symbolic link: not followed"),
        ("mode 0644", "mode 0644: its group or others may read or change it"),
        ("mode 0640", "mode 0640: its group or others may read or change it"),
        ("mode 0602", "mode 0602: its group or others may read or change it"),
        ("other owner", f"owned by uid {OTHER_UID}, not by root or the agent's user"),
        ("hard link", "a file with another name (a hard link)"),
        ("directory", "not a regular file"),
    ],
)
def test_an_env_file_anyone_else_could_read_or_change_is_refused_in_one_line(tmp_path, plant, why):
    real = env_file(tmp_path, f"API_KEY={API_KEY}\n", name="real.env")
    path = tmp_path / "hook.env"
    if plant == "symlink":  # the service user's link to root's file: never followed
        path.symlink_to(real)
    elif plant.startswith("mode"):
        env_file(tmp_path, f"API_KEY={API_KEY}\n", mode=int(plant.split()[1], 8))
    elif plant == "other owner":
        if os.geteuid() != 0:
            pytest.skip("chown to another uid needs root; as non-root a file is always ours")
        env_file(tmp_path, f"API_KEY={API_KEY}\n")
        os.chown(path, OTHER_UID, OTHER_UID)
    elif plant == "hard link":
        os.link(real, path)
    else:
        path.mkdir()
    with pytest.raises(ValueError) as caught:
        read_env_file(path)
    message = str(caught.value)
    assert message.startswith(f"env_file {path}: refused: "), message
    assert why in message and "\n" not in message and API_KEY not in message


def test_a_bad_line_is_named_by_its_number_never_quoted(tmp_path):
    path = env_file(tmp_path, f"OK=1\n{TOKEN}\n")  # the secret pasted without its name
    with pytest.raises(ValueError, match="line 2 is not NAME=value") as caught:
        read_env_file(path)
    assert TOKEN not in str(caught.value)
    (tmp_path / "bad.env").write_bytes(b"K=\xff\n")
    (tmp_path / "bad.env").chmod(0o600)
    with pytest.raises(ValueError, match="not UTF-8"):
        read_env_file(tmp_path / "bad.env")


def hook_config(tmp_path: Path, **keys) -> HookConfig:
    return HookConfig(command=script(tmp_path, "exit 0\n"), **keys)


def test_a_hook_reads_its_credentials_from_the_directory_systemd_hands_over(tmp_path, monkeypatch):
    creds = tmp_path / "credentials"
    creds.mkdir(mode=0o700)
    (creds / "teams-token").write_text(TOKEN + "\n")
    monkeypatch.setenv(CREDENTIALS_DIRECTORY, str(creds))
    path = env_file(tmp_path, f"API_KEY={API_KEY}\nTEAMS_TOKEN=overridden\n")
    cfg = hook_config(tmp_path, env_credentials={"TEAMS_TOKEN": "teams-token"}, env_file=path)
    assert cfg.secrets() == {"API_KEY": API_KEY, "TEAMS_TOKEN": TOKEN}
    # refused when the config is read (check-config, run), in words, never the value
    for keys, words in [
        ({"env_credentials": {"TEAMS_TOKEN": "slack-token"}}, "credential slack-token: not in"),
        ({"env_credentials": {"TEAMS-TOKEN": "teams-token"}}, "env_credentials must name"),
        ({"env_credentials": {"T": f"{TOKEN}+/="}}, "must be a name"),  # the secret itself
        ({"env_file": tmp_path / "none.env"}, "No such file"),
    ]:
        with pytest.raises(ValidationError, match=words) as caught:
            hook_config(tmp_path, **keys)
        assert TOKEN not in caught.value.errors()[0]["msg"]
    path.chmod(0o644)
    with pytest.raises(ValidationError, match="mode 0644"):
        hook_config(tmp_path, env_file=path)


def lines(caplog) -> list[str]:
    return [r.fields["line"] for r in caplog.records if r.getMessage() == "hook output"]


def test_what_a_hook_prints_of_its_secrets_is_masked_in_every_form(tmp_path, caplog):
    redact.keep([TOKEN, API_KEY])
    b64 = base64.b64encode(f"Bearer:{TOKEN}".encode()).decode()
    pad = "x" * (MAX_LINE_BYTES - 7)  # the token straddles the 4,096-byte pieces of a long line
    body = (
        'echo "token=$TEAMS_TOKEN"\n'
        'echo "$TEAMS_TOKEN" | tr a-z A-Z\n'
        f"echo '{json.dumps({'k': TOKEN})}' {b64}\n"
        "printf 'key%%3D%s\\n' \"$API_KEY\"\n"
        f"printf '%s' '{pad}'; echo \"$TEAMS_TOKEN tail\"\n"
    )
    caplog.set_level(logging.INFO, logger="se_forwarder")
    r = go(script(tmp_path, body), tmp_path, env_extra={"TEAMS_TOKEN": TOKEN, "API_KEY": API_KEY})
    assert r.ok
    out = lines(caplog)
    text = "\n".join(out)
    assert TOKEN not in text and TOKEN.upper() not in text and API_KEY not in text
    assert out[0] == "token=***" and out[1] == "***"
    assert out[2].count("***") == 2 and b64 not in text  # JSON, and base64 within base64
    assert out[3] == "key%3D***"
    assert "".join(out[4:]) == pad + "*** tail"  # the pieces together: the line, masked
    assert all(len(p.encode()) <= MAX_LINE_BYTES for p in out[4:])


def test_a_secret_too_short_to_mask_is_left_to_its_hook():
    redact.keep(["1", "true", "short"])
    assert redact.text("1 true short") == "1 true short"
