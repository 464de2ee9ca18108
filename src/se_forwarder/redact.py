"""Secrets out of every text a person or a log collector sees (logs, ``status``, ``check-config``,
dead letters), wherever they sit in a value: a password in a URL, a SAS signature in a query
string, a key in a connection string pasted into the wrong setting, the path of an incoming
webhook (Slack, Teams, Logic Apps: whoever has that URL can post), also percent-encoded.

Two strengths: ``text`` for free text (log lines, errors, a receiver's answer), which masks what
is known to be secret; ``setting`` for a configured value (a setting, a hook's argv element or
``env`` value), which also masks the path of any URL and any connection string whole: a value
that looks like one is far more often a secret than a name.

Secrets known by value (a hook's environment read from a credential or a private file: what a
hook prints need not look like a secret at all) are handed to ``keep``: from then on ``text``
masks each wherever it appears, in any case, percent-encoded, JSON-escaped or in base64.
"""

from __future__ import annotations

import base64
import functools
import json
import re
import threading
from collections.abc import Iterable, Sequence
from typing import Any
from urllib.parse import quote, urlsplit

MASK = "***"
# Matched in lower case against a setting's or an environment variable's name.
SECRET_KEYS = (
    "connection_string",
    "key",
    "secret",
    "password",
    "token",
    "webhook_url",
    "sas",
    "authorization",
    "credentials",
)

# Hosts whose URL path (and query) is the key: Slack, Microsoft Teams (Office 365 connectors,
# Workflows on Logic Apps and Power Platform), Discord.
WEBHOOK_HOSTS = (
    r"hooks\.slack\.com|(?:[\w-]+\.)*webhook\.office\.com|"
    r"outlook\.office(?:365)?\.com|(?:[\w-]+\.)*logic\.azure\.com|"
    r"(?:[\w-]+\.)*powerplatform\.com|(?:canary\.|ptb\.)?discord(?:app)?\.com"
)
_PATH = r"[^\s\"'<>`]*"  # the rest of a URL, up to whitespace or a quote
# scheme://user:password@host -> scheme://user:***@host
_URL_PASSWORD = re.compile(r"(?P<head>\b[a-zA-Z][a-zA-Z0-9+.-]*://[^/\s:@]+:)[^/\s@]+(?=@)")
# ?sig=...&token=... (SAS tokens, webhook keys, OAuth codes)
_QUERY_SECRET = re.compile(
    r"(?P<head>[?&](?:sig|signature|token|access_token|code|key|apikey|api_key|password|secret|"
    r"client_secret)=)[^&#\s]*",
    re.IGNORECASE,
)
# Key=Value;… connection strings (Event Hubs, Storage, SQL)
_CONN_SECRET = re.compile(
    r"(?P<head>\b(?:SharedAccessKey|SharedAccessSignature|AccountKey|Password|Pwd|"
    r"AccessKey)=)[^;\s]*",
    re.IGNORECASE,
)
# Authorization: Bearer <token> / Basic <credentials> (a hook's curl command line)
_AUTH_SCHEME = re.compile(
    r"(?P<head>\b(?:Authorization:\s*(?:Bearer|Basic)|Bearer)\s+)[A-Za-z0-9._~+/=-]{8,}",
    re.IGNORECASE,
)
# A webhook URL, plain or percent-encoded (a receiver quoting it back, a URL inside a query)
_WEBHOOK_URL = re.compile(
    rf"(?P<head>\bhttps?://(?:{WEBHOOK_HOSTS})(?::\d+)?)[/?]{_PATH}", re.IGNORECASE
)
_WEBHOOK_ENCODED = re.compile(
    rf"(?P<head>\bhttps?%3A%2F%2F(?:{WEBHOOK_HOSTS})(?:%3A\d+)?)(?:%2F|%3F)[^\s\"'<>`&]*",
    re.IGNORECASE,
)
# Any URL with a path or a query (for configured values only: see ``setting``)
_ANY_URL = re.compile(rf"(?P<head>\b[a-zA-Z][a-zA-Z0-9+.-]*://[^/\s?#\"'<>`]+)[/?#](?=\S){_PATH}")
_ANY_URL_ENCODED = re.compile(
    r"(?P<head>\b[a-zA-Z][a-zA-Z0-9+.-]*%3A%2F%2F[^\s\"'<>`%&]+)(?:%2F|%3F)[^\s\"'<>`&]*",
    re.IGNORECASE,
)
# Endpoint=…;SharedAccessKeyName=… / AccountName=…;AccountKey=… as a whole value
_CONN_STRING = re.compile(
    r"(?i)(?:^|;)\s*(?:Endpoint|SharedAccessKeyName|SharedAccessKey|SharedAccessSignature|"
    r"AccountName|AccountKey|DefaultEndpointsProtocol|EntityPath)\s*="
)
# What names a secret in a hook's argument or header (``--token=…``, ``X-Api-Key: …``); a name
# ending so names where a secret is kept (a file, a variable), which may be shown.
_SECRET_NAME = (
    r"[\w.-]*(?:token|key|secret|passw(?:or)?d|pwd|authorization|auth|credential|sig)[\w.-]*"
)
_WHERE = ("file", "path", "dir", "env", "name", "id")
_WHERE_TABLES = ("_credentials",)  # a setting's table whose values name secrets, never hold them
# --token=VALUE, password=VALUE (an argument, a query or form piece)
_NAMED_VALUE = re.compile(
    rf"(?P<head>(?<![\w.-])-{{0,2}}(?P<name>{_SECRET_NAME})=)(?P<value>[^\s&;]+)", re.IGNORECASE
)
# --token VALUE (the flag and its value in one string)
_FLAG_VALUE = re.compile(
    rf"(?P<head>(?<![\w.-])--?(?P<name>{_SECRET_NAME})\s+)(?P<value>[^\s-]\S*)", re.IGNORECASE
)
# X-Api-Key: VALUE, Authorization: VALUE (a header, as curl's -H takes it)
_HEADER = re.compile(
    rf"(?P<head>(?<![\w.-])(?P<name>{_SECRET_NAME}):[ \t]*)"
    r"""(?P<value>[^\s"'](?:[^\r\n"']*[^\s"'])?)""",
    re.IGNORECASE,
)
_SCHEME = re.compile(r"(?:Bearer|Basic|Token|Digest|SharedAccessSignature)\s+", re.IGNORECASE)
_FLAG = re.compile(rf"--?(?P<name>{_SECRET_NAME})", re.IGNORECASE)
_HINTS = ("=", "@", " ", ":", "://", "%3a", "%3A")
_WORD = re.compile(r"^[a-z-]+$")  # a path piece that reads as a word, not a key
_LOWER_HEX = re.compile(r"%[0-9A-F]{2}")
# A value kept by ``keep`` shorter than this is not masked wherever it appears: it would mask
# ordinary words and numbers in every line (``1``, ``true``); check-config says so.
MIN_KEPT_CHARS = 8


class _KnownSecrets:
    """The secrets known by value, as one pattern (replaced whole: readers need no lock)."""

    def __init__(self) -> None:
        self.values: frozenset[str] = frozenset()
        self.pattern: re.Pattern[str] | None = None
        self.longest = 0  # characters of the longest form
        self.lock = threading.Lock()


_KEPT = _KnownSecrets()


def _names_a_secret(name: str) -> bool:
    return not name.lower().rstrip("s").endswith(_WHERE)


def _masked(m: re.Match[str]) -> str:
    return m.group("head") + MASK if _names_a_secret(m.group("name")) else m.group(0)


def _header(m: re.Match[str]) -> str:
    name = m.group("name")
    if "-" not in name and name.lower() != "authorization":  # "key: …" in prose: not a header
        return m.group(0)
    if not _names_a_secret(name):
        return m.group(0)
    scheme = _SCHEME.match(m.group("value"))  # "Bearer ***": the kind of credential may show
    return m.group("head") + (scheme.group(0) if scheme else "") + MASK


def keep(values: Iterable[str]) -> None:
    """Mask these secrets in every ``text`` from now on (this process), in the forms a program
    may print them: as they are, in any case, percent-encoded, JSON-escaped, in base64. Values
    under ``MIN_KEPT_CHARS`` are left out (see there)."""
    new = {v for v in values if len(v) >= MIN_KEPT_CHARS}
    with _KEPT.lock:
        if new <= _KEPT.values:
            return
        every = _KEPT.values | new
        forms = sorted({f for v in every for f in _forms(v)}, key=len, reverse=True)
        _KEPT.pattern = re.compile("|".join(re.escape(f) for f in forms), re.IGNORECASE)
        _KEPT.longest = len(forms[0])
        _KEPT.values = frozenset(every)


def kept() -> tuple[re.Pattern[str] | None, int]:
    """The pattern of the secrets ``keep`` was given (None: none) and its longest form's length:
    a reader cutting a stream into pieces (a hook's output) never cuts through one."""
    return _KEPT.pattern, _KEPT.longest


def _forms(s: str) -> set[str]:
    """``s`` plain, percent-encoded (either case of hex) and JSON-escaped, each ``_base64``."""
    encoded = quote(s, safe="")
    plain = {s, encoded, _LOWER_HEX.sub(lambda m: m.group().lower(), encoded), quote(s, safe="/")}
    plain |= {s.replace("/", "\\/"), json.dumps(s, ensure_ascii=True)[1:-1]}
    return plain | _base64(s)


def _base64(s: str) -> set[str]:
    """``s`` in base64 (plain and URL-safe) as it shows inside a longer base64 text, at each of
    the three alignments."""
    raw, out = s.encode(), set()
    for at in range(3):
        chunk = raw[at:][: (len(raw) - at) // 3 * 3]
        if len(chunk) >= 12:
            out.add(base64.b64encode(chunk).decode())
            out.add(base64.urlsafe_b64encode(chunk).decode())
    return out


def text(value: str) -> str:
    """``value`` with every secret-looking part masked."""
    if _KEPT.pattern is not None:
        value = _KEPT.pattern.sub(MASK, value)
    if not any(h in value for h in _HINTS):
        return value  # the common case: nothing to look for
    value = _HEADER.sub(_header, value)
    value = _NAMED_VALUE.sub(_masked, value)
    value = _FLAG_VALUE.sub(_masked, value)
    value = _WEBHOOK_URL.sub(rf"\g<head>/{MASK}", value)
    value = _WEBHOOK_ENCODED.sub(rf"\g<head>%2F{MASK}", value)
    value = _URL_PASSWORD.sub(rf"\g<head>{MASK}", value)
    value = _QUERY_SECRET.sub(rf"\g<head>{MASK}", value)
    value = _AUTH_SCHEME.sub(rf"\g<head>{MASK}", value)
    return _CONN_SECRET.sub(rf"\g<head>{MASK}", value)


def setting(value: str) -> str:
    """A configured value as it may be shown: a connection string masked whole, the path and
    query of any URL in it masked (``scheme://host/***``), then ``text``."""
    if _CONN_STRING.search(value):
        return MASK
    value = _ANY_URL.sub(rf"\g<head>/{MASK}", value)
    value = _ANY_URL_ENCODED.sub(rf"\g<head>%2F{MASK}", value)
    return text(value)


def argv(words: Sequence[str]) -> list[str]:
    """A command's words as they may be shown: each a ``setting``, and the word after a flag
    that names a secret (``--token``, ``--api-key``) masked whole."""
    out: list[str] = []
    secret_next = False
    for word in words:
        out.append(MASK if secret_next and word else setting(word))
        flag = _FLAG.fullmatch(word)
        secret_next = bool(flag) and _names_a_secret(flag.group("name"))  # type: ignore[union-attr]
    return out


def url(value: str) -> str:
    """What may be shown of a URL whose path or query is the key (a Slack or Teams webhook):
    scheme and host."""
    parts = urlsplit(value)
    return f"{parts.scheme}://{parts.hostname or '?'}/{MASK}"


def data(value: Any, key: str = "", *, by_key: bool = True, settings: bool = False) -> Any:
    """A structure with secrets inside every string masked and, ``by_key``, values under
    secret-looking keys masked whole (names of files and variables that hold a secret stay
    visible: they are where to look, not the secret). ``settings``: the strings are configured
    values (``setting``), not free text."""
    if isinstance(value, dict):
        # a table of where secrets are (a hook's env_credentials: variable -> credential name)
        names = by_key and key.lower().endswith(_WHERE_TABLES)
        return {
            k: data(v, str(k), by_key=by_key and not names, settings=settings)
            for k, v in value.items()
        }
    if isinstance(value, (list, tuple)):
        if settings and value and all(isinstance(v, str) for v in value):
            if by_key and any(s in key.lower() for s in SECRET_KEYS):
                return [MASK if v else v for v in value]
            return argv(value)  # a command's words: the one after ``--token`` too
        return [data(v, key, by_key=by_key, settings=settings) for v in value]
    if not isinstance(value, str):
        return value
    lowered = key.lower()
    if (
        by_key
        and value
        and any(s in lowered for s in SECRET_KEYS)
        and not lowered.endswith(("_file", "_env"))
    ):
        return MASK
    return setting(value) if settings else text(value)


def url_secrets(value: str) -> tuple[str, ...]:
    """The forms in which a peer may quote back the secret part of ``value`` (a webhook URL):
    the URL, its path and query and their pieces long enough to be keys (not plain words such
    as ``services``), each plain, percent-encoded (either case of hex) and JSON-escaped
    (``\\/``); longest first, so a longer form is replaced before a piece of it."""
    parts = urlsplit(value)
    tail = parts.path + (f"?{parts.query}" if parts.query else "")
    pieces = [p for p in re.split(r"[/?&=]", tail) if len(p) >= 8 and not _WORD.match(p)]
    forms: set[str] = set()
    for s in (value, tail, parts.path, *pieces):
        if len(s.strip("/")) < 4:
            continue
        encoded = quote(s, safe="")
        forms |= {
            s,
            encoded,
            _LOWER_HEX.sub(lambda m: m.group().lower(), encoded),
            quote(s, safe="/"),
            s.replace("/", "\\/"),
        }
    for s in (value, tail):  # echoed in base64 (a receiver's debug field, a JWT-like blob)
        forms |= _base64(s)
    return tuple(sorted(forms, key=len, reverse=True))


def answer(value: str, secrets: tuple[str, ...], *, cut: bool = False, limit: int = 200) -> str:
    """A peer's answer as it may be shown, on one line: ``secrets`` (``url_secrets``) masked
    before anything else, then ``text``, and only then cut to ``limit`` (a secret cut first
    would no longer be found). ``cut``: the answer was read only in part, so its last
    characters may be the start of a secret: they are dropped."""
    if cut and secrets:
        value = value[: max(0, len(value) - len(secrets[0]))]
    if secrets:  # in any case: a receiver may upper-case what it echoes
        value = _any_of(secrets).sub(MASK, value)
    return " ".join(text(value).split())[:limit]


@functools.lru_cache(maxsize=16)
def _any_of(secrets: tuple[str, ...]) -> re.Pattern[str]:
    return re.compile("|".join(re.escape(s) for s in secrets), re.IGNORECASE)
