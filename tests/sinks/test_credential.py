"""The credential builder: the managed-identity token request must never go through a proxy."""

from __future__ import annotations

import pytest
import requests

from se_forwarder.identity.credential import bypass_proxy_for_imds


def test_imds_is_added_to_no_proxy_in_both_spellings_keeping_existing_entries():
    env = {"NO_PROXY": "localhost,.internal", "HTTP_PROXY": "http://proxy:3128"}
    bypass_proxy_for_imds(env)
    assert env["NO_PROXY"] == "localhost,.internal,169.254.169.254"
    assert env["no_proxy"] == "169.254.169.254"
    bypass_proxy_for_imds(env)  # idempotent
    assert env["NO_PROXY"].count("169.254.169.254") == 1


def test_requests_then_goes_direct_to_imds(monkeypatch):
    """What azure-identity's transport (requests) decides, with a proxy set for the VM."""
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")
    monkeypatch.setenv("http_proxy", "http://127.0.0.1:9")
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    url = "http://169.254.169.254/metadata/identity/oauth2/token"
    assert requests.utils.get_environ_proxies(url)  # the trap: it would use the proxy
    import os

    bypass_proxy_for_imds(os.environ)
    assert not requests.utils.get_environ_proxies(url)


@pytest.mark.parametrize("kind", ["managed", "default"])
def test_building_a_credential_sets_the_bypass(monkeypatch, kind):
    from se_forwarder.identity.config import IdentityConfig
    from se_forwarder.identity.credential import build as credential

    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    credential(IdentityConfig(kind=kind))
    import os

    assert "169.254.169.254" in os.environ["NO_PROXY"]


def test_an_overridden_token_authority_bypasses_the_proxy_too():
    env = {"AZURE_POD_IDENTITY_AUTHORITY_HOST": "http://127.0.0.1:40123", "NO_PROXY": "corp"}
    bypass_proxy_for_imds(env)
    assert env["NO_PROXY"] == "corp,169.254.169.254,127.0.0.1"


@pytest.mark.e2e
def test_a_token_is_had_through_dead_proxies_with_the_authority_overridden(monkeypatch, simulator):
    """HTTP_PROXY and HTTPS_PROXY point at a closed port; the managed-identity token request
    (to the overridden authority, the simulator) still goes straight there."""
    from helpers import DEAD_PROXY

    from se_forwarder.identity.config import IdentityConfig
    from se_forwarder.identity.credential import build

    sim = simulator()
    for var, value in DEAD_PROXY.items():
        monkeypatch.setenv(var, value)
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    monkeypatch.setenv("AZURE_POD_IDENTITY_AUTHORITY_HOST", sim.url)
    cred = build(IdentityConfig())
    try:
        token = cred.get_token("https://monitor.azure.com/.default")
    finally:
        cred.close()
    assert token.token and any("oauth2/token" in r.path for r in sim.requests)


@pytest.mark.e2e
def test_the_token_endpoint_is_a_setting_of_the_identity_section(monkeypatch, simulator, tmp_path):
    """Local testing of the Azure sinks needed AZURE_POD_IDENTITY_AUTHORITY_HOST, which only a
    code comment named: [identity] token_endpoint is the documented way, still managed identity,
    still never through a proxy."""
    from helpers import DEAD_PROXY

    from se_forwarder.config import load
    from se_forwarder.identity.credential import build, describe

    sim = simulator()
    for var, value in DEAD_PROXY.items():
        monkeypatch.setenv(var, value)
    for var in ("NO_PROXY", "no_proxy", "AZURE_POD_IDENTITY_AUTHORITY_HOST"):
        monkeypatch.delenv(var, raising=False)
    path = tmp_path / "config.toml"
    path.write_text(f'[identity]\ntoken_endpoint = "{sim.url}/"\n')
    cfg = load(path, env={}).identity
    assert cfg.token_endpoint == sim.url
    assert describe(cfg) == f"system-assigned managed identity (tokens from {sim.url})"
    cred = build(cfg)
    try:
        token = cred.get_token("https://monitor.azure.com/.default")
    finally:
        cred.close()
    assert token.token and any("oauth2/token" in r.path for r in sim.requests)


@pytest.mark.parametrize(
    "value",
    [
        "ftp://127.0.0.1:1",
        "http://127.0.0.1:1/metadata/identity",
        "127.0.0.1:8080",
        "http://u:p@127.0.0.1:1",
    ],
)
def test_a_token_endpoint_that_is_not_an_authority_is_refused(tmp_path, value):
    from se_forwarder.config import load
    from se_forwarder.errors import ConfigError

    path = tmp_path / "config.toml"
    path.write_text(f'[identity]\ntoken_endpoint = "{value}"\n')
    with pytest.raises(ConfigError, match=r"identity\.token_endpoint: must be http://host"):
        load(path, env={})
