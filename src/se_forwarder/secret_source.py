"""Secrets handed over the systemd way: a credential.

The service runs as a dynamic user in its own user namespace (``DynamicUser=yes``,
``PrivateUsers=yes``): a file only root can read is closed to it, and a file it can read is open to
every local user. So a secret (a webhook URL, an Event Hubs connection string) is a systemd
credential: ``LoadCredential=NAME:/etc/se-forwarder/credentials/NAME`` (or
``LoadCredentialEncrypted=``) in the unit, which systemd, as root, copies into a directory only the
service can read and names in ``$CREDENTIALS_DIRECTORY``. The config names the credential
(``url_credential``, ``connection_string_credential``); this reads it.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

CREDENTIALS_DIRECTORY = "CREDENTIALS_DIRECTORY"  # set by systemd for a unit that loads credentials
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}")


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
            f"LoadCredential={name}:<file> in its unit (install.sh --credential {name}=FILE); "
            "check-config --credentials-dir DIR reads a directory of them"
        )
    try:
        text = (Path(directory) / name).read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        raise ValueError(
            f"credential {name}: not in $CREDENTIALS_DIRECTORY ({directory}): the "
            f"unit loads none of that name (LoadCredential={name}:<file>)"
        ) from None
    except OSError as exc:
        raise ValueError(f"credential {name}: cannot read: {exc.strerror}") from None
    if not text:
        raise ValueError(f"credential {name} is empty")
    return text
