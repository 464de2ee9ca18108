"""``[sinks.webhook]``: where notifications go, in which format, and which records.

The URL of an incoming webhook is a secret (whoever holds it can post to the channel): it is read
from a systemd credential (``url_credential``: how the sandboxed service gets it, see
``se_forwarder.secret_source``), a file (``url_file``) or an environment variable (``url_env``),
never written in the config,
never kept in this model, never logged; ``check-config`` shows only where it comes from. Every
rule ``run`` applies is checked here, so what ``check-config`` accepts, ``run`` accepts.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

from pydantic import Field, field_validator, model_validator

from ...config_types import EventTypes, OptionalPath, Phases, variable_name
from ...secret_source import read_credential
from ..batching import BatchConfig
from .template import template, templates


class WebhookSinkConfig(BatchConfig):
    url_file: OptionalPath = None  # a file holding the URL (mode 0600, owned by the agent's user)
    url_env: str = ""  # or the name of an environment variable holding it
    url_credential: str = ""  # or the name of a systemd credential ($CREDENTIALS_DIRECTORY/<name>)
    format: Literal["json", "slack", "teams"] = "json"
    phases: Phases = Field(default_factory=list)  # empty: every phase
    # notices (a hook that failed, an approval given up, an event that started before its hooks
    # finished): told whatever ``phases`` says; false: records only
    notices: bool = True
    # the message over named fields (template.FIELDS): slack/teams its text, json a JSON document
    template: str = ""
    templates: dict[str, str] = Field(default_factory=dict)  # per kind (Phase or notice)
    event_types: EventTypes = Field(default_factory=list)  # empty: every type
    # absent: every event this VM sees (its own and other VMs'); true: this VM's events only;
    # false: other VMs' only
    affects_this_vm: bool | None = None
    timeout: float = Field(10.0, gt=0, le=120)  # seconds per request, all of it (answer included)
    ca_file: OptionalPath = None  # also trust this CA (a private receiver, the local stand-in)
    # how long 404/410 must last (every answer in between one of them) before "gone for good"
    gone_after_seconds: float = Field(3600.0, ge=1, le=7 * 86400)

    @model_validator(mode="before")
    @classmethod
    def _renamed(cls, data: object) -> object:
        if isinstance(data, dict) and "gone_after" in data:
            raise ValueError(
                "gone_after (a number of answers) was replaced by gone_after_seconds "
                "(how long 404/410 must last before the destination is gone)"
            )
        return data

    @field_validator("max_records")
    @classmethod
    def _one(cls, v: int | None) -> int | None:
        if v not in (None, 1):
            raise ValueError("a webhook takes one record per request (leave max_records out)")
        return v

    @model_validator(mode="after")
    def _url_source(self) -> WebhookSinkConfig:
        if self.template:
            template(self.template, self.format)
        templates(self.templates, self.format)
        if sum((self.url_file is not None, bool(self.url_env), bool(self.url_credential))) != 1:
            raise ValueError(
                "set exactly one of url_file / url_env / url_credential (the URL is "
                "a secret: never in the config itself)"
            )
        self.url()
        return self

    def url(self) -> str:
        """The URL from its credential, file or variable; ValueError when unusable, never quoting
        the URL nor the setting that names its source (pasted there by mistake, it is the URL)."""
        if self.url_credential:
            text, where = read_credential(self.url_credential), "url_credential: the credential"
        elif self.url_file is not None:
            try:
                text = Path(self.url_file).read_text(encoding="utf-8").strip()
            except OSError as exc:
                raise ValueError(
                    f"url_file: cannot read the file it names ({exc.strerror})"
                ) from None
            where = "url_file: the file it names"
        else:
            variable_name(self.url_env, "url_env", "the URL")
            text = os.environ.get(self.url_env, "").strip()
            where = "url_env: the variable it names"
        if not text:
            raise ValueError(f"{where} is empty or not set")
        parts = urlsplit(text)
        if parts.scheme != "https" or not parts.hostname or any(c.isspace() for c in text):
            raise ValueError(f"{where} does not hold an https:// URL")
        return text
