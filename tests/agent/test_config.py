"""Configuration: TOML, environment overrides, errors that name the key, masked output."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from se_forwarder.config import Config, load, masked
from se_forwarder.errors import ConfigError
from se_forwarder.redact import data as mask_secrets


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "config.toml"
    p.write_text(text)
    return p


def test_defaults_without_a_file():
    cfg = load(None, env={})
    assert cfg.agent.poll_interval == 1.0
    assert cfg.imds.endpoint == "http://169.254.169.254"
    assert cfg.imds.api_version == "2020-07-01"
    assert cfg.spool.max_bytes == 256 * 1024 * 1024
    assert cfg.sinks.enabled() == {}


def test_file_then_environment_overrides(tmp_path):
    path = write(tmp_path, '[agent]\npoll_interval = 2\n[sinks.file]\npath = "/tmp/a.jsonl"\n')
    cfg = load(
        path,
        env={
            "SE_FORWARDER_AGENT__POLL_INTERVAL": "3.5",
            "SE_FORWARDER_SINKS__FILE__BACKUPS": "2",
            "SE_FORWARDER_IMDS__API_VERSION": "2019-08-01",
            "UNRELATED": "x",
        },
    )
    assert cfg.agent.poll_interval == 3.5
    assert cfg.sinks.file is not None and cfg.sinks.file.backups == 2
    assert cfg.sinks.file.path == Path("/tmp/a.jsonl")
    assert cfg.imds.api_version == "2019-08-01"


def test_environment_alone_can_enable_a_sink():
    cfg = load(
        None,
        env={
            "SE_FORWARDER_SINKS__LOG_ANALYTICS__ENDPOINT": "https://x.ingest.monitor.azure.com",
            "SE_FORWARDER_SINKS__LOG_ANALYTICS__DCR_IMMUTABLE_ID": "dcr-1",
        },
    )
    assert cfg.sinks.log_analytics is not None
    assert cfg.sinks.log_analytics.records_stream == "Custom-ScheduledEvents"


@pytest.mark.parametrize(
    "text,key",
    [
        ("[agent]\npoll_intervl = 1\n", "agent.poll_intervl: unknown key"),
        ("[agent]\npoll_interval = 0\n", "agent.poll_interval"),
        ('[imds]\nendpoint = "https://169.254.169.254"\n', "imds.endpoint"),
        ('[imds]\napi_version = "latest"\n', "imds.api_version"),
        ("[imds]\nmax_requests_per_second = 10\n", "imds.max_requests_per_second"),
        ("[sinks.file]\n", "sinks.file.path"),
        (
            '[sinks.log_analytics]\nendpoint = "http://x"\ndcr_immutable_id = "d"\n',
            "sinks.log_analytics.endpoint",
        ),
        ("[sinks.kafka]\n", "sinks.kafka: unknown key"),
        # sections validated by their model only when present (config_types.section_of): the
        # errors keep their place as a nested model's do
        ('[sinks.webhook]\nurl_env = "HOOK"\nformat = "x"\n', "sinks.webhook.format"),
        ("[sinks.stdout]\nnope = 1\n", "sinks.stdout.nope: unknown key"),
        ('[policy]\npreset = "everything"\n', "policy.preset"),
        ('[[policy.rules]]\napprove = "sometimes"\n', "policy.rules.0.approve"),
        ('[kubernetes]\nnode_name = "n"\nnope = 1\n', "kubernetes.nope: unknown key"),
        ('[[kubernetes.drain]]\naction = "reboot"\n', "kubernetes.drain.0.action"),
    ],
)
def test_errors_name_the_key(tmp_path, text, key):
    with pytest.raises(ConfigError) as err:
        load(write(tmp_path, text), env={})
    assert key in str(err.value)
    assert str(tmp_path) in str(err.value)


def test_invalid_toml_and_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="not valid TOML"):
        load(write(tmp_path, "[agent\n"), env={})
    with pytest.raises(ConfigError, match="no such file"):
        load(tmp_path / "nope.toml", env={})


def test_mask_secrets_masks_values_but_not_where_they_live():
    out = mask_secrets(
        {
            "sinks": {
                "event_hubs": {
                    "connection_string": "Endpoint=sb://x;SharedAccessKey=s3cr3t",
                    "connection_string_file": "/etc/se-forwarder/eh.conn",
                    "connection_string_env": "EH_CONN",
                    "hub": "h",
                }
            },
            "token": "eyJ...",
            "empty_key": "",
        }
    )
    eh = out["sinks"]["event_hubs"]
    assert eh["connection_string"] == "***" and out["token"] == "***"
    assert (
        eh["connection_string_file"] == "/etc/se-forwarder/eh.conn"
        and eh["connection_string_env"] == "EH_CONN"
    )
    assert eh["hub"] == "h" and out["empty_key"] == ""
    assert "s3cr3t" not in json.dumps(out)


def test_a_feature_section_is_its_model_when_present_and_none_when_absent(tmp_path):
    """[policy], [kubernetes] and each sink are validated by their own model only when the file
    has them (their modules are not imported otherwise: tests/architecture/test_run_path)."""
    from se_forwarder.kube.config import KubernetesConfig
    from se_forwarder.policy.config import PolicyConfig
    from se_forwarder.sinks.stdout.config import StdoutSinkConfig

    absent = load(None, env={})
    assert (absent.policy, absent.kubernetes, absent.sinks.stdout) == (None, None, None)
    path = write(
        tmp_path,
        '[policy]\npreset = "microsoft"\n[kubernetes]\nnode_name = "aks-1"\n[sinks.stdout]\n',
    )
    cfg = load(path, env={"SE_FORWARDER_KUBERNETES__CLUSTER": "c1"})
    assert isinstance(cfg.policy, PolicyConfig) and cfg.policy.preset == "microsoft"
    assert cfg.policy.acts  # the preset's rules approve
    assert isinstance(cfg.kubernetes, KubernetesConfig)
    assert (cfg.kubernetes.node_name, cfg.kubernetes.cluster) == ("aks-1", "c1")
    assert isinstance(cfg.sinks.stdout, StdoutSinkConfig)
    # a model given as it is stays that model; the effective config shows every section
    given = Config(policy=cfg.policy)
    assert given.policy is cfg.policy
    shown = masked(cfg)
    assert shown["policy"]["preset"] == "microsoft" and shown["kubernetes"]["node_name"] == "aks-1"
    assert shown["sinks"]["stdout"] == cfg.sinks.stdout.model_dump(mode="json")
    # no [policy]: shown as the default policy it stands for
    assert masked(absent)["policy"] == PolicyConfig().model_dump(mode="json")


def test_masked_config_is_json_ready():
    cfg = Config.model_validate({"sinks": {"file": {"path": "/tmp/r.jsonl"}}})
    assert json.loads(json.dumps(masked(cfg)))["sinks"]["file"]["path"] == "/tmp/r.jsonl"


def run_cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "se_forwarder.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )


@pytest.mark.process
def test_check_config_prints_the_effective_config(tmp_path):
    path = write(tmp_path, '[sinks.file]\npath = "/tmp/x.jsonl"\n')
    res = run_cli("check-config", "--config", str(path))
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    assert data["sinks"]["file"]["path"] == "/tmp/x.jsonl"
    assert data["agent"]["poll_interval"] == 1.0


@pytest.mark.process
def test_check_config_exits_2_on_a_bad_key(tmp_path):
    res = run_cli("check-config", "--config", str(write(tmp_path, "[agent]\nfoo = 1\n")))
    assert res.returncode == 2
    assert "agent.foo: unknown key" in res.stderr and res.stdout == ""


@pytest.mark.process
@pytest.mark.parametrize(
    "command", ["run", "check-config", "status", "replay", "simulate", "demo", "standin"]
)
def test_help_on_every_command(command):
    res = run_cli(command, "--help")
    assert res.returncode == 0, res.stderr
    assert "usage: se-forwarder" in res.stdout


@pytest.mark.process
def test_usage_errors_exit_2():
    assert run_cli().returncode == 2
    assert run_cli("no-such-command").returncode == 2
    assert run_cli("replay").returncode == 2  # TRACE missing


def test_run_does_not_import_the_simulator_or_stand_ins():
    code = (
        "import sys; from se_forwarder import cli; p = cli.build_parser('run'); "
        "print(sorted(m for m in sys.modules if m.startswith(('se_forwarder_testbed.simulator', "
        "'se_forwarder_testbed.standins', 'azure', 'proton', 'httpx'))))"
    )
    res = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "[]"


@pytest.mark.process
def test_demo_refuses_to_empty_a_directory_it_did_not_make(tmp_path):
    (tmp_path / "keep.txt").write_text("precious")
    res = run_cli("demo", "--dir", str(tmp_path))
    assert res.returncode == 2 and "refusing to empty it" in res.stderr
    assert (tmp_path / "keep.txt").read_text() == "precious"


@pytest.mark.process
def test_demo_unknown_scenario_exits_2_naming_the_built_ins(tmp_path):
    res = run_cli("demo", "--dir", str(tmp_path / "d"), "--scenario", "nope")
    assert res.returncode == 2
    assert "no such scenario" in res.stderr and "live-migration-freeze" in res.stderr


def test_a_builtin_scenario_name_wins_over_a_directory_of_that_name(tmp_path, monkeypatch):
    from se_forwarder_testbed.simulator.scenario import load_scenario

    (tmp_path / "demo").mkdir()
    monkeypatch.chdir(tmp_path)
    assert load_scenario("demo").name == "demo"


@pytest.mark.process
@pytest.mark.parametrize(
    "section,value,secret",
    [
        ("imds", 'endpoint = "http://user:hunter2@169.254.169.254"', "hunter2"),
        (
            "sinks.log_analytics",
            (
                'endpoint = "https://x.ingest.monitor.azure.com/?sv=2024&sig=AbC%2Fd3f"'
                '\ndcr_immutable_id = "dcr-1"'
            ),
            "AbC%2Fd3f",
        ),
        (
            "agent",
            (
                'vm_name = "Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=s;'
                'SharedAccessKey=Zm9vYmFy"'
            ),
            "Zm9vYmFy",
        ),
        (
            "sinks.file",
            'path = "/var/lib/x.jsonl"\nheartbeat_path = "/h?token=s3cr3tT0k3n"',
            "s3cr3tT0k3n",
        ),
    ],
)
def test_secrets_inside_any_value_are_masked_in_check_config(tmp_path, section, value, secret):
    """Not by key name alone: a password in a URL, a SAS signature, a key pasted elsewhere."""
    cfg = write(tmp_path, f"[sinks.stdout]\n\n[{section}]\n{value}\n")
    r = run_cli("check-config", "--config", str(cfg), env={"PATH": "/usr/bin:/bin"})
    assert r.returncode == 0, r.stderr
    assert secret not in r.stdout and "***" in r.stdout


def test_secrets_in_hooks_are_masked_in_both_halves_of_check_config(tmp_path, capsys):
    """Environment variable names are upper case by custom; a token may sit in a hook's argv."""
    from se_forwarder import cli

    hook = tmp_path / "notify"
    hook.write_text("#!/bin/sh\n")
    hook.chmod(0o755)
    cfg = write(
        tmp_path,
        f"""
[sinks.stdout]

[policy.hooks.notify]
command = ["{hook}", "-H", "Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.c2VjcmV0"]

[policy.hooks.notify.env]
API_TOKEN = "tok-Upper-1234"
SLACK_WEBHOOK_URL = "https://hooks.slack.com/services/T/B/XyZ"
Region = "west"

[[policy.rules]]
name = "notify"
pre_hooks = ["notify"]
""",
    )
    assert cli.main(["check-config", "--config", str(cfg)]) == 0
    out, err = capsys.readouterr()
    for secret in ("tok-Upper-1234", "XyZ", "eyJhbGciOiJIUzI1NiJ9"):
        assert secret not in out and secret not in err, secret
    assert '"Region": "west"' in out and "Bearer ***" in out


def test_mask_secrets_matches_key_names_in_any_case():
    out = mask_secrets(
        {"API_TOKEN": "a", "Db_Password": "b", "Sas": "c", "TOKEN_FILE": "/p", "name": "x"}
    )
    assert out == {
        "API_TOKEN": "***",
        "Db_Password": "***",
        "Sas": "***",
        "TOKEN_FILE": "/p",
        "name": "x",
    }


def test_hook_arguments_and_headers_that_are_secrets_are_masked_by_what_they_are(tmp_path, capsys):
    """Issue 33: ``--token=…``, ``--api-key …`` and ``X-Api-Key: …`` appeared verbatim in
    check-config, the policy in words and every dry-run line: only URLs were masked."""
    from se_forwarder import cli, redact

    hook = tmp_path / "notify"
    hook.write_text("#!/bin/sh\n")
    hook.chmod(0o755)
    argv = [
        str(hook),
        "--token=tok-AAAA1111",
        "--api-key",
        "key-BBBB2222",
        "-H",
        "X-Api-Key: hdr-CCCC3333",
        "--password",
        "pw-DDDD4444",
        "--key-file",
        "/etc/se/key.pem",
    ]
    cfg = write(
        tmp_path,
        f"[sinks.stdout]\n\n[policy.hooks.notify]\ncommand = {json.dumps(argv)}\n\n"
        '[[policy.rules]]\nname = "notify"\npre_hooks = ["notify"]\n',
    )
    assert cli.main(["check-config", "--config", str(cfg)]) == 0
    out, err = capsys.readouterr()
    for secret in ("tok-AAAA1111", "key-BBBB2222", "hdr-CCCC3333", "pw-DDDD4444"):
        assert secret not in out and secret not in err, secret
    assert "/etc/se/key.pem" in err  # where a secret is kept is not a secret
    shown = redact.argv(argv)  # what the dry-run lines and the policy in words show
    assert shown[1:8] == [
        "--token=***",
        "--api-key",
        "***",
        "-H",
        "X-Api-Key: ***",
        "--password",
        "***",
    ]
    line = "sh -c 'curl --token abc123xyz -H \"Authorization: Bearer eyJ0eXAi.x\" https://h/'"
    assert "abc123xyz" not in redact.text(line) and "eyJ0eXAi" not in redact.text(line)
