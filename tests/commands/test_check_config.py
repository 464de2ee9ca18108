"""``check-config`` runs the very validation ``run`` runs, sink rules included: what it accepts,
``run`` can build; what it refuses, it refuses with one line naming the key, exit 2, and never
prints a secret. As root (or with --as-service) it also checks the files the config names as the
sandboxed service sees them: only what every user may read, no /tmp of the host, secrets through
systemd credentials ($CREDENTIALS_DIRECTORY)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from helpers import build_sinks

from se_forwarder.config import load

pytestmark = pytest.mark.process

CONN = (
    "Endpoint=sb://ns1.servicebus.windows.net/;SharedAccessKeyName=send;"
    "SharedAccessKey=c2VjcmV0LWtleS12YWx1ZQ=="
)
SECRET = "c2VjcmV0LWtleS12YWx1ZQ=="


def check_config(path, *args: str, **env: str) -> subprocess.CompletedProcess:
    """check-config as the caller reads the files (--as-invoker), unless args say otherwise."""
    view = [] if any(a.startswith("--as-") for a in args) else ["--as-invoker"]
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "se_forwarder.cli",
            "check-config",
            "--config",
            str(path),
            *view,
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={"PATH": "/usr/bin:/bin", "EH_CONN": CONN, **env},
    )


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
    (
        {"connection_string_env": "NOT_SET_ANYWHERE"},
        False,
        "the variable it names is empty or not set",
    ),
    ({"connection_string_file": "{d}/nope.conn"}, False, "cannot read"),
    ({"connection_string_file": "{d}/empty.conn"}, False, "is empty"),
    ({"connection_string_file": "{d}/bad.conn"}, False, "connection string part 1 is malformed"),
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
        [sink] = build_sinks(load(path))  # what check-config accepts, run can build
        sink.close()
    else:
        assert r.returncode == 2 and "sinks.event_hubs" in r.stderr and named in r.stderr, r.stderr
        assert r.stdout == "" and len(r.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize(
    "section,named",
    [
        (
            (
                '[sinks.log_analytics]\nendpoint = "https://x.ingest.monitor.azure.com"\n'
                'dcr_immutable_id = "my-rule"\n'
            ),
            "dcr_immutable_id",
        ),
        (
            (
                '[sinks.log_analytics]\nendpoint = "https://x.ingest.monitor.azure.com"\n'
                'dcr_immutable_id = "dcr-1"\nrecords_stream = "ScheduledEvents"\n'
            ),
            "records_stream",
        ),
        ('[sinks.file]\npath = "/tmp/r.jsonl"\nmax_bytes = 10\n', "sinks.file.max_bytes"),
        ("[sinks.stdout]\nheartbeat = true\n", "sinks.stdout.heartbeat: unknown key"),
    ],
)
def test_every_sink_section_is_validated_by_check_config(tmp_path, section, named):
    path = tmp_path / "config.toml"
    path.write_text(section)
    r = check_config(path)
    assert r.returncode == 2 and named in r.stderr, r.stderr


# -- secrets from every place they were found printed (issue 18) ---------------------------------

SLACK = "https://hooks.slack.com/services/T0AAAAAAA/B0BBBBBBB/s3cretWebhookKey0"
SLACK_KEY = "s3cretWebhookKey0"
LOGIC = (
    "https://prod-07.westeurope.logic.azure.com:443/workflows/0123abcd4567ef/triggers/manual/"
    "paths/invoke?api-version=2016-06-01&sp=%2Ftriggers%2Fmanual%2Frun&sv=1.0&sig=SiGsEcReT"
)
OTHER = "https://notify.example.org/hooks/SeCrEtPaThToKeN"


def both(path, env: dict[str, str]) -> list[subprocess.CompletedProcess]:
    """``check-config`` and ``run`` (which must refuse the same config the same way)."""
    return [
        subprocess.run(
            [sys.executable, "-m", "se_forwarder.cli", *command, "--config", str(path)],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            env={"PATH": "/usr/bin:/bin", **env},
        )
        for command in (["check-config", "--as-invoker"], ["run"])
    ]


@pytest.mark.parametrize(
    "body,env,named",
    [
        (
            f'[sinks.webhook]\nurl_env = "{SLACK}"\n',
            {},
            "url_env must name an environment variable",
        ),
        (
            "",
            {"SE_FORWARDER_SINKS__WEBHOOK__URL_ENV": SLACK},
            "SE_FORWARDER_SINKS__WEBHOOK__URL_ENV: sinks.webhook: url_env must name",
        ),
        (f'[sinks.webhook]\nurl_file = "{SLACK}"\n', {}, "url_file: cannot read the file it names"),
        (
            f'[sinks.webhook]\nurl_credential = "{SLACK}"\n',
            {"CREDENTIALS_DIRECTORY": "/nonexistent"},
            "the credential's name must be a name",
        ),
        (
            '[sinks.event_hubs]\nhub = "h"\nconnection_string_file = "{d}/key-only.conn"\n',
            {},
            "connection string part 1 has an unknown key",
        ),
        (
            f'[sinks.event_hubs]\nhub = "h"\nconnection_string_env = "{CONN}"\n',
            {},
            "connection_string_env must name an environment variable",
        ),
        (
            "",
            {
                "SE_FORWARDER_SINKS__EVENT_HUBS__HUB": "h",
                "SE_FORWARDER_SINKS__EVENT_HUBS__CONNECTION_STRING_ENV": CONN,
            },
            "connection_string_env must name an environment variable",
        ),
    ],
    ids=[
        "url_env",
        "url_env-override",
        "url_file",
        "url_credential",
        "key-only-file",
        "conn-env",
        "conn-env-override",
    ],
)
def test_a_secret_given_where_its_source_belongs_is_never_printed(tmp_path, body, env, named):
    (tmp_path / "key-only.conn").write_text(SECRET + "\n")
    path = tmp_path / "config.toml"
    path.write_text(body.format(d=tmp_path))
    for r in both(path, env):
        out = r.stdout + r.stderr
        assert r.returncode == 2 and named in out, out
        for secret in (
            SLACK_KEY,
            SECRET,
            "T0AAAAAAA",
            "SharedAccessKey=",
            "hooks.slack.com/services",
        ):
            assert secret not in out, (secret, out)


def test_urls_in_a_hooks_argv_and_env_are_masked_in_the_json_and_in_words(tmp_path):
    hook = tmp_path / "notify"
    hook.write_text("#!/bin/sh\n")
    hook.chmod(0o755)
    path = tmp_path / "config.toml"
    path.write_text(f"""
[sinks.stdout]

[policy.hooks.notify]
command = ["{hook}", "--to", "{SLACK}", "--also", "{LOGIC}", "{OTHER}"]

[policy.hooks.notify.env]
WHERE = "{SLACK}"
ENCODED = "{SLACK.replace(":", "%3A").replace("/", "%2F")}"
TEAMS = "{LOGIC}"

[policy.hooks.shell]
command = "curl -d @- {OTHER} && echo {SLACK}"
shell = true

[[policy.rules]]
pre_hooks = ["notify", "shell"]
""")
    r = check_config(path)
    assert r.returncode == 0, r.stderr
    out = r.stdout + r.stderr
    for secret in (SLACK_KEY, "T0AAAAAAA", "0123abcd4567ef", "SiGsEcReT", "SeCrEtPaThToKeN"):
        assert secret not in out, (secret, out)
    shown = json.loads(r.stdout)["policy"]["hooks"]["notify"]
    assert shown["command"][1:] == [
        "--to",
        "https://hooks.slack.com/***",
        "--also",
        "https://prod-07.westeurope.logic.azure.com:443/***",
        "https://notify.example.org/***",
    ]
    assert shown["env"]["WHERE"] == "https://hooks.slack.com/***"
    assert "run notify (" in r.stderr and "https://hooks.slack.com/***" in r.stderr


def test_an_environment_override_is_named_in_its_error_not_the_config_file(tmp_path):
    path = tmp_path / "config.toml"
    path.write_text("[agent]\npoll_interval = 1\n")
    r = both(
        path, {"SE_FORWARDER_POLICY__DRYRUN": "true", "SE_FORWARDER_AGENT__POLL_INTERVAL": "-3"}
    )[0]
    assert r.returncode == 2
    assert "SE_FORWARDER_POLICY__DRYRUN: policy.dryrun: unknown key" in r.stderr, r.stderr
    assert "SE_FORWARDER_AGENT__POLL_INTERVAL: agent.poll_interval:" in r.stderr, r.stderr
    assert f"{path}: policy.dryrun" not in r.stderr
    path.write_text("[agent]\npoll_intervl = 1\n")  # the file's own mistakes still name the file
    r = both(path, {})[0]
    assert f"{path}: agent.poll_intervl: unknown key" in r.stderr, r.stderr


# --- as the service sees the files ---------------------------------------------------------------

URL = "https://hooks.example/services/T0/B0/c2VjcmV0LXVybA"


def webhook(tmp_path, body: str) -> Path:
    path = tmp_path / "config.toml"
    path.write_text(f"[sinks.webhook]\n{body}\n")
    return path


def test_a_root_only_secret_file_is_refused_for_the_service(tmp_path):
    """The unit's DynamicUser cannot read a file only root can: check-config says so (it passed
    as root before), and says how to hand the secret over."""
    secret = tmp_path / "webhook.url"
    secret.write_text(URL + "\n")
    secret.chmod(0o600)
    cfg = webhook(tmp_path, f'url_file = "{secret}"')
    assert check_config(cfg, "--as-invoker").returncode == 0  # the caller can read it
    r = check_config(cfg, "--as-service")
    assert r.returncode == 2 and r.stdout == "", r.stderr
    assert f"sinks.webhook.url_file: the service cannot read {secret}: mode 0600" in r.stderr
    assert f"install.sh --credential webhook-url={secret}" in r.stderr
    assert 'url_credential = "webhook-url"' in r.stderr and "c2VjcmV0LXVybA" not in r.stderr


def test_files_the_service_cannot_see(tmp_path):
    """A readable file under a directory others may not enter, or in the host's /tmp (the unit
    has PrivateTmp=yes), is not there for the service."""
    from se_forwarder.commands.check_config import unreadable_by_service

    closed = tmp_path / "closed"
    closed.mkdir(mode=0o700)
    (closed / "ca.pem").write_text("x")
    (closed / "ca.pem").chmod(0o644)
    assert "its directory" in unreadable_by_service(closed / "ca.pem")
    open_dir = Path(tempfile.mkdtemp(dir="/tmp"))
    try:
        open_dir.chmod(0o755)
        (open_dir / "ca.pem").write_text("x")
        (open_dir / "ca.pem").chmod(0o644)
        assert "PrivateTmp=yes" in unreadable_by_service(open_dir / "ca.pem")
    finally:
        shutil.rmtree(open_dir)
    assert unreadable_by_service(Path("/etc/hostname")) is None  # 0644, under 0755 directories


def test_a_credential_is_read_as_systemd_hands_it_over(tmp_path):
    creds = tmp_path / "credentials"
    creds.mkdir(mode=0o700)
    (creds / "webhook-url").write_text(URL + "\n")
    cfg = webhook(tmp_path, 'url_credential = "webhook-url"\nformat = "slack"')
    r = check_config(cfg, "--as-service", "--credentials-dir", str(creds))
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["sinks"]["webhook"]["url_credential"] == "webhook-url"
    assert "c2VjcmV0LXVybA" not in r.stdout + r.stderr
    # the variable systemd sets for the service does the same
    assert check_config(cfg, "--as-service", CREDENTIALS_DIRECTORY=str(creds)).returncode == 0
    # a credential the unit does not load, and no credentials at all
    other = webhook(tmp_path, 'url_credential = "slack-url"')
    r = check_config(other, "--as-service", "--credentials-dir", str(creds))
    assert r.returncode == 2 and "credential slack-url: not in $CREDENTIALS_DIRECTORY" in r.stderr
    r = check_config(cfg, "--as-service")
    assert r.returncode == 2 and "$CREDENTIALS_DIRECTORY is not set" in r.stderr, r.stderr


def test_an_event_hubs_connection_string_credential(tmp_path, monkeypatch):
    creds = tmp_path / "credentials"
    creds.mkdir()
    (creds / "eventhubs-connection-string").write_text(CONN)
    path = tmp_path / "config.toml"
    path.write_text(
        '[sinks.event_hubs]\nhub = "scheduled-events"\n'
        'connection_string_credential = "eventhubs-connection-string"\n'
    )
    r = check_config(path, "--as-service", "--credentials-dir", str(creds))
    assert r.returncode == 0 and SECRET not in r.stdout + r.stderr, r.stderr
    monkeypatch.setenv("CREDENTIALS_DIRECTORY", str(creds))
    [sink] = build_sinks(load(path))  # what check-config accepts, run can build
    sink.close()


def test_as_root_the_service_view_is_the_default(tmp_path):
    secret = tmp_path / "webhook.url"
    secret.write_text(URL + "\n")
    secret.chmod(0o600)
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "se_forwarder.cli",
            "check-config",
            "--config",
            str(webhook(tmp_path, f'url_file = "{secret}"')),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    as_root = sys.platform.startswith("linux") and os.geteuid() == 0
    assert r.returncode == (2 if as_root else 0), r.stderr
    assert ("the service cannot read" in r.stderr) == as_root


def test_a_config_with_no_sink_is_refused(tmp_path):
    """`run` would keep every record in the outbox and deliver nothing: refused, exit 2."""
    path = tmp_path / "config.toml"
    path.write_text("[agent]\nheartbeat_interval = 60\n")
    r = check_config(path)
    assert r.returncode == 2 and r.stdout == ""
    assert "config error: no sink" in r.stderr


def test_a_sink_whose_extra_is_missing_is_refused(tmp_path):
    """A webhook sink without httpx (the webhook extra) passed check-config and `run` died with
    ModuleNotFoundError: refused now, naming the extra. Run by an interpreter that cannot
    import httpx (a sitecustomize that hides it: what an install without the extra sees)."""
    (tmp_path / "url").write_text("https://hooks.example.com/x\n")
    path = tmp_path / "config.toml"
    path.write_text(f'[sinks.webhook]\nurl_file = "{tmp_path / "url"}"\n')
    assert check_config(path).returncode == 0  # this environment has the extra
    hide = tmp_path / "hide"
    hide.mkdir()
    (hide / "sitecustomize.py").write_text(
        "import importlib.abc, sys\n"
        "class Hide(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'httpx' or name.startswith('httpx.'):\n"
        "            raise ModuleNotFoundError(name)\n"
        "sys.meta_path.insert(0, Hide())\n"
    )
    r = check_config(path, PYTHONPATH=str(hide))
    assert r.returncode == 2 and r.stdout == "", r.stderr
    assert "[sinks.webhook] needs the webhook extra" in r.stderr
    assert "no module httpx" in r.stderr


def test_the_modules_checked_for_each_extra_are_the_ones_the_code_imports():
    """A misspelt module would refuse every configuration of its section: each one named is
    importable here (the dev environment has every extra)."""
    from se_forwarder.commands.check_config import NEEDS, _importable

    for section, (modules, _extra) in NEEDS.items():
        for m in modules:
            assert _importable(m), (section, m)


def test_the_collectors_approvals_are_off_unless_asked_and_said_to_be_preview(tmp_path):
    """[collector.preview_acknowledge]: off by default (observe only, in words); on, it names the
    preview and the rules in words; refused without the agents' workspace (no way to know which
    VMs run an agent) or without the inventory."""
    out = tmp_path / "out.jsonl"
    base = f'[sinks.file]\npath = "{out}"\nplatform_path = "{out}"\n\n[collector]\n'
    path = tmp_path / "collector.toml"
    path.write_text(base)
    r = check_config(path)
    assert r.returncode == 0, r.stderr
    assert "collector approvals: off (observe only" in r.stderr
    on = "[collector.preview_acknowledge]\nenabled = true\n"
    path.write_text(base + on)
    r = check_config(path)
    assert r.returncode == 2 and "needs agents_workspace_id" in r.stderr
    path.write_text(base + "inventory_interval = 0\n" + on + 'agents_workspace_id = "w"\n')
    r = check_config(path)
    assert r.returncode == 2 and "needs Resource Graph's inventory" in r.stderr
    rule = (
        '\n[[collector.preview_acknowledge.rules]]\nevent_types = ["Reboot"]\n'
        'services = ["batch"]\nahead_seconds = 600\n'
    )
    path.write_text(base + on + 'agents_workspace_id = "w"\n' + rule)
    r = check_config(path)
    assert r.returncode == 0, r.stderr
    assert "collector approvals: ON, through Azure's acknowledge API, in PREVIEW" in r.stderr
    assert "rule 1: events Reboot; services batch: approve it at most 600s before NotBefore" in (
        r.stderr
    )
    started = '\n[[collector.preview_acknowledge.rules]]\nevent_statuses = ["Started"]\n'
    path.write_text(base + on + 'agents_workspace_id = "w"\n' + started)
    r = check_config(path)
    assert r.returncode == 2 and "approves Scheduled events only" in r.stderr


# --- a hook's secrets --------------------------------------------------------------------------

HOOK_TOKEN = "hook-token-5e1f0a9c8b7d"


def hook_with_secrets(tmp_path, keys: str) -> Path:
    hook = tmp_path / "notify"
    hook.write_text("#!/bin/sh\n")
    hook.chmod(0o755)
    path = tmp_path / "config.toml"
    path.write_text(f"""
[sinks.stdout]

[policy.hooks.notify]
command = ["{hook}"]
{keys}

[[policy.rules]]
pre_hooks = ["notify"]
""")
    return path


def test_a_hooks_credentials_are_named_never_shown_and_checked_as_the_service_gets_them(
    tmp_path,
):
    creds = tmp_path / "credentials"
    creds.mkdir(mode=0o700)
    (creds / "teams-token").write_text(HOOK_TOKEN)
    (creds / "pin").write_text("1234")
    cfg = hook_with_secrets(
        tmp_path,
        'env_credentials = { TEAMS_TOKEN = "teams-token", PIN = "pin" }\n'
        'env = { API_TOKEN = "pasted-here-0000", REGION = "westeurope" }',
    )
    r = check_config(cfg, "--as-service", "--credentials-dir", str(creds))
    assert r.returncode == 0, r.stderr
    shown = json.loads(r.stdout)["policy"]["hooks"]["notify"]
    assert shown["env_credentials"] == {"TEAMS_TOKEN": "teams-token", "PIN": "pin"}
    assert shown["env"] == {"API_TOKEN": "***", "REGION": "westeurope"}
    assert HOOK_TOKEN not in r.stdout + r.stderr and "pasted-here-0000" not in r.stdout + r.stderr
    assert (
        "warning: policy.hooks.notify.env.API_TOKEN: a secret by its name, in the configuration "
        "file: put it in a systemd credential (env_credentials)" in r.stderr
    )
    assert "warning: policy.hooks.notify: PIN under 8 characters" in r.stderr
    assert "REGION" not in r.stderr  # not a secret by its name
    r = check_config(cfg, "--as-service")  # no credentials handed over: what to do, unmasked
    assert r.returncode == 2 and (
        "env_credentials.TEAMS_TOKEN: credential teams-token: $CREDENTIALS_DIRECTORY is not "
        "set: the service gets it from a LoadCredential= line for teams-token in its unit "
        "(install.sh writes one, given --credential)" in r.stderr
    ), r.stderr


def test_a_hooks_env_file_is_for_an_agent_of_its_own_user_and_must_be_private(tmp_path):
    env_file = tmp_path / "hook.env"
    env_file.write_text(f"TEAMS_TOKEN={HOOK_TOKEN}\n")
    env_file.chmod(0o600)
    cfg = hook_with_secrets(tmp_path, f'env_file = "{env_file}"')
    assert check_config(cfg, "--as-invoker").returncode == 0
    r = check_config(cfg, "--as-service")  # the dynamic user cannot read a private file
    assert r.returncode == 2 and r.stdout == ""
    assert f"policy.hooks.notify.env_file: the service cannot read {env_file}" in r.stderr
    assert "install.sh --credential NAME=FILE" in r.stderr and HOOK_TOKEN not in r.stderr
    env_file.chmod(0o644)
    r = check_config(cfg, "--as-invoker")
    assert r.returncode == 2, r.stderr
    assert f"env_file {env_file}: refused: mode 0644" in r.stderr and HOOK_TOKEN not in r.stderr
    env_file.chmod(0o600)
    link = tmp_path / "link.env"
    link.symlink_to(env_file)
    r = check_config(hook_with_secrets(tmp_path, f'env_file = "{link}"'), "--as-invoker")
    assert r.returncode == 2 and "a symbolic link: not followed" in r.stderr, r.stderr
