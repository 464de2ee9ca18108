"""``[sinks.event_hubs]``: where the hub is and how the agent proves who it is.

Every rule ``run`` applies is checked here, so what ``check-config`` accepts, ``run`` accepts: a
namespace (with the ``[identity]``) or a connection string from a file or a variable, and a
connection string that parses. The connection string itself is never kept in the model (only
where it comes from), so it never reaches a log line or ``check-config``'s output.
"""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import Field, field_validator, model_validator

from ...config_types import OptionalPath, variable_name
from ...secret_source import read_credential
from ..batching import BatchConfig

_CONN_KEYS = {
    "endpoint",
    "sharedaccesskeyname",
    "sharedaccesskey",
    "entitypath",
    "sharedaccesssignature",
    "usedevelopmentemulator",
}


class EventHubsSinkConfig(BatchConfig):
    namespace: str = ""  # <ns>.servicebus.windows.net, with the [identity]
    hub: str = Field(min_length=1)
    connection_string_file: OptionalPath = None  # instead of the identity; never logged
    connection_string_env: str = ""
    connection_string_credential: str = ""  # a systemd credential ($CREDENTIALS_DIRECTORY/<name>)
    endpoint: str = ""  # custom endpoint address (sb://host:port), for local stand-ins
    ca_file: OptionalPath = None
    timeout: float = Field(30.0, gt=0, le=300)  # seconds for one send (connect + Accepted)

    @field_validator("namespace")
    @classmethod
    def _namespace(cls, v: str) -> str:
        if "=" in v or ";" in v:
            raise ValueError(
                "looks like a connection string: put it in a file and set "
                "connection_string_file (it is a secret)"
            )
        return v.strip()

    @model_validator(mode="after")
    def _credential_source(self) -> EventHubsSinkConfig:
        conn = self.connection_string()
        if conn is None and not self.namespace:
            raise ValueError(
                "set namespace (used with the [identity]) or one of "
                "connection_string_credential / connection_string_file / "
                "connection_string_env"
            )
        if conn is not None:
            check_connection_string(conn)
        return self

    def connection_string(self) -> str | None:
        """The connection string from its credential, file or variable, or None when none is
        set. Raises ValueError (never quoting the secret) when the source is set but unusable."""
        if self.connection_string_credential:
            return read_credential(self.connection_string_credential)
        if self.connection_string_file is not None:
            try:
                text = Path(self.connection_string_file).read_text(encoding="utf-8").strip()
            except OSError as exc:
                raise ValueError(
                    f"connection_string_file: cannot read the file it names ({exc.strerror})"
                ) from None
            if not text:
                raise ValueError("connection_string_file: the file it names is empty")
            return text
        if self.connection_string_env:
            variable_name(
                self.connection_string_env, "connection_string_env", "the connection string"
            )
            text = os.environ.get(self.connection_string_env, "").strip()
            if not text:
                raise ValueError("connection_string_env: the variable it names is empty or not set")
            return text
        return None


def check_connection_string(text: str) -> None:
    """Raise ValueError naming what is wrong (never the key) unless ``text`` is an Event Hubs
    connection string: ``Endpoint=sb://…;SharedAccessKeyName=…;SharedAccessKey=…``."""
    parts: dict[str, str] = {}
    for n, chunk in enumerate((c for c in text.split(";") if c.strip()), 1):
        key, sep, value = chunk.partition("=")  # a part is named by its position, never quoted:
        if not sep or not key.strip():  # a key alone, or base64 ending in '=', is the secret
            raise ValueError(
                f"connection string part {n} is malformed (expected Key=Value "
                "pairs separated by ';')"
            )
        if key.strip().lower() not in _CONN_KEYS:
            raise ValueError(
                f"connection string part {n} has an unknown key (expected "
                "Endpoint, SharedAccessKeyName, SharedAccessKey, "
                "SharedAccessSignature, EntityPath)"
            )
        parts[key.strip().lower()] = value.strip()
    if not parts.get("endpoint", "").startswith("sb://"):
        raise ValueError(
            "connection string needs Endpoint=sb://<namespace>.servicebus.windows.net/"
        )
    has_key = parts.get("sharedaccesskeyname") and parts.get("sharedaccesskey")
    if not has_key and not parts.get("sharedaccesssignature"):
        raise ValueError(
            "connection string needs SharedAccessKeyName and SharedAccessKey "
            "(or SharedAccessSignature)"
        )
