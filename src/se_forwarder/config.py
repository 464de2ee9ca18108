"""Configuration: a TOML file, then ``SE_FORWARDER_<SECTION>__<KEY>`` environment overrides,
validated by pydantic. Every error names the key, so a typo in a fleet rollout is obvious."""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar, overload

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from . import oshost, redact
from .config_types import section_of
from .errors import ConfigError
from .identity.config import IdentityConfig
from .imds.config import ImdsConfig
from .imds.tags import check_names
from .metrics.config import MetricsConfig
from .outbox.config import SpoolConfig
from .sinks import kinds

ENV_PREFIX = "SE_FORWARDER_"


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class AgentConfig(_Section):
    state_dir: Path = Field(default_factory=lambda: Path(oshost.current().default_state_dir()))
    poll_interval: float = Field(1.0, gt=0, le=60)
    heartbeat_interval: float = Field(300.0, gt=0)
    log_format: Literal["json", "text"] = "json"
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    stop_flush_seconds: float = Field(5.0, ge=0)  # on SIGTERM: how long to let sinks drain
    # This VM's name until the instance document answers (default: unknown); it decides
    # AffectsThisVm. The instance document's compute.name wins once known.
    vm_name: str = ""
    # A second status.json on a file system that stays writable when the state directory's
    # does not (health/runtime_copy.py); empty: $RUNTIME_DIRECTORY (systemd), else none.
    runtime_dir: str = ""

    # The VM tags recorded on every record and heartbeat (column Tags), e.g. ["service", "env",
    # "team"]: the fleet view groups VMs into services by one of them. Tags not named here are
    # never read or sent. From the environment: a comma-separated list.
    tags: list[str] = Field(default_factory=list)

    @field_validator("tags", mode="before")
    @classmethod
    def _tag_list(cls, v: Any) -> Any:
        if isinstance(v, str):  # SE_FORWARDER_AGENT__TAGS=service,env
            return [p.strip() for p in v.split(",") if p.strip()]
        return v

    @field_validator("tags")
    @classmethod
    def _tag_names(cls, v: list[str]) -> list[str]:
        return check_names(v)


# `[sinks]`: one optional table per sink kind (present = enabled), each validated by the model its
# package declares; this module names no sink. `[policy]` and `[kubernetes]` likewise: a section's
# model is imported only when the file has it (config_types.section_of).
if TYPE_CHECKING:
    from .kube.config import KubernetesConfig
    from .policy.config import PolicyConfig

    SinksConfig = kinds.SinksSection
    PolicySection = PolicyConfig | None
    KubernetesSection = KubernetesConfig | None


def _policy_model() -> type[PolicyConfig]:
    from .policy.config import PolicyConfig

    return PolicyConfig


def _kubernetes_model() -> type[KubernetesConfig]:
    from .kube.config import KubernetesConfig

    return KubernetesConfig


if not TYPE_CHECKING:
    SinksConfig = kinds.section()
    # each model imported only when the file has its table (section_of)
    PolicySection = section_of(_policy_model)
    KubernetesSection = section_of(_kubernetes_model)


class Config(_Section):
    agent: AgentConfig = Field(default_factory=AgentConfig)
    imds: ImdsConfig = Field(default_factory=ImdsConfig)
    spool: SpoolConfig = Field(default_factory=SpoolConfig)
    identity: IdentityConfig = Field(default_factory=IdentityConfig)
    sinks: SinksConfig = Field(default_factory=SinksConfig)
    metrics: MetricsConfig = Field(default_factory=MetricsConfig)
    # None: no [policy], the default policy (observe: no hook, no approval)
    policy: PolicySection = None
    # `se-forwarder collect`'s section: the agent neither reads nor imports its model (the
    # collector's own, `collector.config.CollectorFileConfig`, validates it for `collect` and
    # `check-config`)
    collector: dict[str, Any] | None = None
    kubernetes: KubernetesSection = None  # on a Kubernetes node (docs/kubernetes.md)


C = TypeVar("C", bound=Config)


@overload
def load(path: str | os.PathLike[str] | None, env: Mapping[str, str] | None = None) -> Config: ...
@overload
def load(
    path: str | os.PathLike[str] | None, env: Mapping[str, str] | None = None, *, model: type[C]
) -> C: ...


def load(
    path: str | os.PathLike[str] | None,
    env: Mapping[str, str] | None = None,
    model: type[Config] = Config,
) -> Config:
    """The configuration as ``model`` (``Config``, or a command's own extension of it)."""
    data: dict[str, Any] = {}
    if path is not None:
        try:
            with open(path, "rb") as f:
                data = tomllib.load(f)
        except FileNotFoundError:
            raise ConfigError(f"{path}: no such file") from None
        except OSError as exc:
            raise ConfigError(f"{path}: cannot read: {exc.strerror}") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    from_file = _keys(data)
    from_env = _apply_env(data, os.environ if env is None else env)
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        lines = []
        for err in exc.errors():
            loc = tuple(str(p) for p in err["loc"])
            msg = (
                "unknown key"
                if err["type"] == "extra_forbidden"
                else err["msg"].removeprefix("Value error, ")
            )
            lines.append(f"{_source(loc, path, from_file, from_env)}{'.'.join(loc)}: {msg}")
        raise ConfigError(redact.setting("; ".join(lines))) from None


def _keys(data: dict[str, Any], prefix: tuple[str, ...] = ()) -> set[tuple[str, ...]]:
    """Every key path the file sets (tables and values)."""
    out: set[tuple[str, ...]] = set()
    for k, v in data.items():
        out.add((*prefix, str(k)))
        if isinstance(v, dict):
            out |= _keys(v, (*prefix, str(k)))
    return out


def _source(
    loc: tuple[str, ...],
    path: str | os.PathLike[str] | None,
    from_file: set[tuple[str, ...]],
    from_env: dict[tuple[str, ...], str],
) -> str:
    """Where the setting an error is about came from: the variable that set it (or, for an error
    about a whole table, the variables that set keys in it, and the file if it did too)."""
    exact = [name for key, name in from_env.items() if loc[: len(key)] == key]
    if exact:
        return f"{exact[0]}: "
    inside = sorted(name for key, name in from_env.items() if key[: len(loc)] == loc)
    if inside:
        also = f" and {path}" if path and any(k[: len(loc)] == loc for k in from_file) else ""
        return f"{', '.join(inside)}{also}: "
    return f"{path}: " if path else ""


def _apply_env(data: dict[str, Any], env: Mapping[str, str]) -> dict[tuple[str, ...], str]:
    """``SE_FORWARDER_SINKS__FILE__PATH=/x`` sets ``data["sinks"]["file"]["path"]``; returns which
    variable set which key (errors name the variable, not the file)."""
    names: dict[tuple[str, ...], str] = {}
    for name, value in env.items():
        if not name.startswith(ENV_PREFIX):
            continue
        path = [p.lower() for p in name[len(ENV_PREFIX) :].split("__") if p]
        if len(path) < 2:
            continue
        node = data
        for part in path[:-1]:
            nxt = node.setdefault(part, {})
            if not isinstance(nxt, dict):
                raise ConfigError(f"{name}: {'.'.join(path)} does not name a setting")
            node = nxt
        node[path[-1]] = value
        names[tuple(path)] = name
    return names


def masked(config: Config) -> dict[str, Any]:
    """The effective config as plain data, secrets masked (by key and inside every value); no
    ``[policy]`` is shown as the default policy it stands for."""
    data = config.model_dump(mode="json")
    if data.get("policy") is None:
        data["policy"] = _policy_model()().model_dump(mode="json")
    shown: dict[str, Any] = redact.data(data, settings=True)
    return shown
