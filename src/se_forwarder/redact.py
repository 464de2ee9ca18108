"""Secrets out of every text a person or a log collector sees (logs, ``status``, ``check-config``),
wherever they sit in a value: a password in a URL, a SAS signature in a query string, a key in a
connection string pasted into the wrong setting."""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlsplit

MASK = "***"
# Matched in lower case against a setting's or an environment variable's name.
SECRET_KEYS = ("connection_string", "key", "secret", "password", "token", "webhook_url", "sas",
               "authorization", "credentials")

# scheme://user:password@host -> scheme://user:***@host
_URL_PASSWORD = re.compile(r"(?P<head>\b[a-zA-Z][a-zA-Z0-9+.-]*://[^/\s:@]+:)[^/\s@]+(?=@)")
# ?sig=...&token=... (SAS tokens, webhook keys, OAuth codes)
_QUERY_SECRET = re.compile(
    r"(?P<head>[?&](?:sig|signature|token|access_token|code|key|apikey|api_key|password|secret|"
    r"client_secret)=)[^&#\s]*", re.IGNORECASE)
# Key=Value;… connection strings (Event Hubs, Storage, SQL)
_CONN_SECRET = re.compile(
    r"(?P<head>\b(?:SharedAccessKey|SharedAccessSignature|AccountKey|Password|Pwd|"
    r"AccessKey)=)[^;\s]*", re.IGNORECASE)
# Authorization: Bearer <token> / Basic <credentials> (a hook's curl command line)
_AUTH_SCHEME = re.compile(
    r"(?P<head>\b(?:Authorization:\s*(?:Bearer|Basic)|Bearer)\s+)[A-Za-z0-9._~+/=-]{8,}",
    re.IGNORECASE)


def text(value: str) -> str:
    """``value`` with every secret-looking part masked."""
    if "=" not in value and "@" not in value and " " not in value:
        return value  # the common case: nothing to look for
    value = _URL_PASSWORD.sub(rf"\g<head>{MASK}", value)
    value = _QUERY_SECRET.sub(rf"\g<head>{MASK}", value)
    value = _AUTH_SCHEME.sub(rf"\g<head>{MASK}", value)
    return _CONN_SECRET.sub(rf"\g<head>{MASK}", value)


def url(value: str) -> str:
    """What may be shown of a URL whose path or query is the key (a Slack or Teams webhook):
    scheme and host."""
    parts = urlsplit(value)
    return f"{parts.scheme}://{parts.hostname or '?'}/{MASK}"


def data(value: Any, key: str = "", *, by_key: bool = True) -> Any:
    """A structure with secrets inside every string masked and, ``by_key``, values under
    secret-looking keys masked whole (names of files and variables that hold a secret stay
    visible: they are where to look, not the secret)."""
    if isinstance(value, dict):
        return {k: data(v, str(k), by_key=by_key) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [data(v, key, by_key=by_key) for v in value]
    if not isinstance(value, str):
        return value
    lowered = key.lower()
    if (by_key and value and any(s in lowered for s in SECRET_KEYS)
            and not lowered.endswith(("_file", "_env"))):
        return MASK
    return text(value)
