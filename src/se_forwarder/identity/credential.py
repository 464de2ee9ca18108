"""The credential for the Azure sinks (azure-identity), built once per sink from ``[identity]``.

- ``kind = "managed"`` (the default): ``ManagedIdentityCredential``, system-assigned, or the
  user-assigned identity whose client id is ``client_id``. On a VM it asks IMDS for tokens;
  ``token_endpoint`` points it elsewhere (the simulator, for local testing), through the variable
  azure-identity reads for that, ``AZURE_POD_IDENTITY_AUTHORITY_HOST`` (set here, before the
  credential is built; its host bypasses any proxy like IMDS's).
- ``kind = "default"``: ``DefaultAzureCredential`` (environment, workload identity, managed
  identity, Azure CLI, ...), an opt-in for running the agent off Azure. ``client_id`` then selects
  the managed identity it may fall back to.

This module imports azure-identity lazily: it is itself imported only by the Azure sinks (which
the sink registry imports only when one is configured) and the collector.
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping
from typing import Any
from urllib.parse import urlsplit

from ..clock import SYSTEM, Clock
from .config import IdentityConfig

IMDS_HOSTS = ("169.254.169.254",)
# Where azure-identity sends token requests instead, when set: overrides of the IMDS authority
# (AZURE_POD_IDENTITY_AUTHORITY_HOST: tests, the demo, pod identity) and other managed-identity
# endpoints. Their hosts bypass the proxy too.
AUTHORITY_VARIABLES = ("AZURE_POD_IDENTITY_AUTHORITY_HOST", "IDENTITY_ENDPOINT", "MSI_ENDPOINT")
# One token answer (about 2 KB) is read at most this deep and within this time; past either, the
# connection is closed and azure-identity's retry policy tries again.
TOKEN_MAX_BYTES = 64 * 1024
TOKEN_SECONDS = 10.0
TOKEN_CONNECT_SECONDS = 2.0  # azure-identity's own for IMDS, which a given transport does not get


def bypass_proxy_for_imds(environ: MutableMapping[str, str] = os.environ) -> None:
    """azure-identity reaches IMDS through ``requests``, which honours ``HTTP_PROXY``: a classic
    field failure on VMs with a proxy. Put the IMDS address, and the host of any overridden token
    authority, in ``NO_PROXY``/``no_proxy`` (both spellings: tools read one or the other) before
    any credential is built."""
    hosts = list(IMDS_HOSTS)
    for var in AUTHORITY_VARIABLES:
        host = urlsplit(environ.get(var, "").strip()).hostname
        if host and host not in hosts:
            hosts.append(host)
    for var in ("NO_PROXY", "no_proxy"):
        entries = [e.strip() for e in environ.get(var, "").split(",") if e.strip()]
        missing = [h for h in hosts if h not in entries]
        if missing:
            environ[var] = ",".join(entries + missing)


def describe(cfg: IdentityConfig) -> str:
    """One line naming the identity in use (for log lines; never a secret)."""
    if cfg.kind == "default":
        return "DefaultAzureCredential" + (
            f" (managed identity client id {cfg.client_id})" if cfg.client_id else ""
        )
    notes = ([f"client id {cfg.client_id}"] if cfg.client_id else []) + (
        [f"tokens from {cfg.token_endpoint}"] if cfg.token_endpoint else []
    )
    kind = "user-assigned" if cfg.client_id else "system-assigned"
    return f"{kind} managed identity" + (f" ({', '.join(notes)})" if notes else "")


def build(
    cfg: IdentityConfig,
    environ: MutableMapping[str, str] = os.environ,
    *,
    clock: Clock = SYSTEM,
    **pipeline: Any,
) -> Any:
    """A ``TokenCredential`` (sync) for the configured identity, its token answers read through
    a bounded transport (``TOKEN_MAX_BYTES``, ``TOKEN_SECONDS`` overall on ``clock``);
    ``pipeline``: more of azure-identity's keyword arguments (``retry_total``)."""
    if cfg.token_endpoint:
        environ[AUTHORITY_VARIABLES[0]] = cfg.token_endpoint
    bypass_proxy_for_imds(environ)
    from . import bounded_transport

    pipeline.setdefault(
        "transport",
        bounded_transport.transport(
            TOKEN_MAX_BYTES, TOKEN_SECONDS, clock, connection_timeout=TOKEN_CONNECT_SECONDS
        ),
    )
    client_id = cfg.client_id.strip() or None
    if cfg.kind == "default":
        from azure.identity import DefaultAzureCredential

        return DefaultAzureCredential(managed_identity_client_id=client_id, **pipeline)
    from azure.identity import ManagedIdentityCredential

    if client_id:
        return ManagedIdentityCredential(client_id=client_id, **pipeline)
    return ManagedIdentityCredential(**pipeline)
