"""Secrets handed over the systemd way: a credential.

The service runs as a dynamic user in its own user namespace (``DynamicUser=yes``,
``PrivateUsers=yes``): a file only root can read is closed to it, and a file it can read is open to
every local user. So a secret (a webhook URL, an Event Hubs connection string) is a systemd
credential: ``LoadCredential=NAME:/etc/se-forwarder/credentials/NAME`` (or
``LoadCredentialEncrypted=``) in the unit, which systemd, as root, copies into a directory only the
service can read and names in ``$CREDENTIALS_DIRECTORY``. The config names the credential
(``url_credential``, ``connection_string_credential``); this reads it.

A hook's secrets (a Teams or Slack token, an API key a drain script needs) come the same way
(``env_credentials``: variable -> credential) or, for an agent that runs as root or as a user
of its own, from an environment file only root or that user can read (``env_file``): opened
without following a link, owned by root or the agent's user, no permission for its group or
others; anything else is refused with one line saying why. Every value read is handed to
``redact.keep``: masked in every output from then on, a hook's printed output included.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Mapping
from pathlib import Path

from . import redact
from .oshost import files

CREDENTIALS_DIRECTORY = "CREDENTIALS_DIRECTORY"  # set by systemd for a unit that loads credentials
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}")
_VARIABLE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_QUOTED = re.compile(r"""^(["'])(.*)\1$""", re.DOTALL)
MAX_ENV_FILE_BYTES = 64 * 1024


def read_credential(name: str) -> str:
    """The credential's text, stripped. ValueError naming what is wrong (never the secret)."""
    if not _NAME.fullmatch(name):  # not quoted: what is not a name is usually the secret itself
        raise ValueError(
            "the credential's name must be a name (letters, digits, '_', '.', '-', "
            "at most 64), not the secret itself"
        )
    directory = os.environ.get(CREDENTIALS_DIRECTORY, "")
    if not directory:
        raise ValueError(
            f"credential {name}: $CREDENTIALS_DIRECTORY is not set: the service gets it from "
            f"a LoadCredential= line for {name} in its unit (install.sh writes one, given "
            "--credential); check-config --credentials-dir DIR reads a directory of them"
        )
    try:
        text = (Path(directory) / name).read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        raise ValueError(
            f"credential {name}: not in $CREDENTIALS_DIRECTORY ({directory}): the "
            "unit loads none of that name (no LoadCredential= line for it)"
        ) from None
    except OSError as exc:
        raise ValueError(f"credential {name}: cannot read: {exc.strerror}") from None
    if not text:
        raise ValueError(f"credential {name} is empty")
    return text


def hook_environment(env_file: Path | None, credentials: Mapping[str, str]) -> dict[str, str]:
    """A hook's secret variables: ``env_file``'s, then each ``credentials`` variable from its
    credential; every value kept secret (``redact.keep``). ValueError naming what is wrong,
    never a value."""
    out = read_env_file(env_file) if env_file is not None else {}
    for variable, name in credentials.items():
        try:
            out[variable] = read_credential(name)
        except ValueError as exc:
            raise ValueError(f"env_credentials.{variable}: {exc}") from None
    redact.keep(out.values())
    return out


def read_env_file(path: Path) -> dict[str, str]:
    """``NAME=value`` lines (blank lines and ``#`` comments skipped, ``export`` and one pair of
    quotes around a value allowed) of a file only root or this process's user can read."""
    data = _private_bytes(path)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError(f"env_file {path}: not UTF-8 text") from None
    out: dict[str, str] = {}
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        name, eq, value = line.removeprefix("export ").partition("=")
        name = name.strip()
        if not eq or not _VARIABLE.fullmatch(name) or "\x00" in value:
            raise ValueError(  # never the line: it may be the secret itself
                f"env_file {path}: line {n} is not NAME=value (a name of letters, digits "
                "and _, no NUL)"
            )
        value = value.strip()
        quoted = _QUOTED.match(value)
        out[name] = quoted.group(2) if quoted else value
    return out


def _private_bytes(path: Path) -> bytes:
    """The file's bytes, read without following a link, if root or this process's user owns it
    and neither its group nor others may read or write it."""
    try:
        fd = files.open_own(path, os.O_RDONLY, 0)
    except OSError as exc:
        raise ValueError(f"env_file {path}: refused: {exc.strerror or exc}") from None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        problem = _ownership_problem(st) if os.name == "posix" else None
        if problem:
            raise ValueError(f"env_file {path}: refused: {problem}")
        data = f.read(MAX_ENV_FILE_BYTES + 1)
    if len(data) > MAX_ENV_FILE_BYTES:
        raise ValueError(f"env_file {path}: refused: over {MAX_ENV_FILE_BYTES} bytes")
    return data


def _ownership_problem(st: os.stat_result) -> str | None:
    if st.st_uid not in (0, os.geteuid()):
        return (
            f"owned by uid {st.st_uid}, not by root or the agent's user (uid {os.geteuid()}): "
            "that user could change what the hook is given"
        )
    mode = stat.S_IMODE(st.st_mode)
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        return (
            f"mode {mode:04o}: its group or others may read or change it; make it the "
            "owner's alone (chmod 0600)"
        )
    return None
