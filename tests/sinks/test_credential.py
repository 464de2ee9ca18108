"""The credential builder: the managed-identity token request must never go through a proxy."""

from __future__ import annotations

import pytest
import requests

from se_forwarder.sinks.credential import bypass_proxy_for_imds


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
    from se_forwarder.config import IdentityConfig
    from se_forwarder.sinks.credential import build as credential
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    credential(IdentityConfig(kind=kind))
    import os
    assert "169.254.169.254" in os.environ["NO_PROXY"]
