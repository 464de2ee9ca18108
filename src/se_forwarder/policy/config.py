"""``[policy]``: what the agent does when an event arrives, as ordered rules.

The default observes only (no rule, no hook, no approval): installing the agent never changes
when maintenance happens. Every rule ``run`` applies is checked here (hooks that exist and can be
run, rules that name defined hooks, ranges that make sense), so ``check-config`` refuses what
``run`` would refuse.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ..config_types import EventSources, EventStatuses, EventTypes, OptionalPath, variable_name
from ..model import EventStatus
from ..oshost import process
from ..secret_source import hook_environment
from .service_config import ServiceConfig

# "service": after the pre-hooks, early only through the service's coordinator ([policy.service])
Approve = Literal["never", "after-hooks", "at-once", "service"]
MultiVm = Literal["never", "leader"]
HOOK_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
# cmd.exe expands %NAME% (any case, with its substring and substitution forms: %SE_X:~0%,
# %SE_X:a=b%) and, with delayed expansion, !NAME!, before it parses the line: event data there
# runs as commands.
EVENT_DATA_IN_CMD_LINE = re.compile(r"%\s*SE_[^%\r\n]*%|!\s*SE_[^!\r\n]*!", re.IGNORECASE)
# Programs whose arguments cmd.exe reads as a line: cmd itself, and batch files it runs.
_CMD_PROGRAM = re.compile(r"(?:^|[\\/])cmd(?:\.exe)?$|\.(?:bat|cmd)$", re.IGNORECASE)


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class HookConfig(_Model):
    """``[policy.hooks.<name>]``: one command. An argv list, run without a shell; a single string
    only with ``shell = true`` (then ``/bin/sh -c`` or ``cmd.exe /c``)."""

    command: list[str] | str
    shell: bool = False
    timeout: float = Field(300.0, gt=0, le=86_400)  # seconds; then its process group is killed
    env: dict[str, str] = Field(default_factory=dict)  # added to the hook's environment
    # secrets added to it, never in the config (secret_source.hook_environment): variable ->
    # systemd credential ($CREDENTIALS_DIRECTORY/<name>), and a file of NAME=value lines that
    # only root or the agent's user can read
    env_credentials: dict[str, str] = Field(default_factory=dict)
    env_file: OptionalPath = None

    @model_validator(mode="after")
    def _secrets_readable(self) -> HookConfig:
        for variable in self.env_credentials:
            variable_name(variable, "env_credentials", "a secret")
        self.secrets()  # refused now rather than at the hook's first run
        return self

    def secrets(self) -> dict[str, str]:
        """The hook's secret variables, read again for each run (a credential systemd renewed, a
        file an operator changed). ValueError saying what is wrong, never a value."""
        return hook_environment(self.env_file, self.env_credentials)

    @model_validator(mode="after")
    def _runnable(self) -> HookConfig:
        words = [self.command] if isinstance(self.command, str) else list(self.command)
        if any("\x00" in w for w in [*words, *self.env, *self.env.values()]):
            raise ValueError(
                "a NUL character (\\u0000) in command or env: no process can be given one"
            )
        if any(not k or "=" in k for k in self.env):
            raise ValueError("an env name is empty or holds '='")
        if self.shell:
            if not isinstance(self.command, str) or not self.command.strip():
                raise ValueError("with shell = true, command is one string for the shell")
            if found := EVENT_DATA_IN_CMD_LINE.search(self.command):
                raise ValueError(
                    f"{found.group()} in a shell = true line: cmd.exe expands it "
                    "before parsing, so event text such as '& del ...' would run; "
                    "read the record on standard input or give an argv list"
                )
            program = process.shell_argv(self.command)[0]
        else:
            if isinstance(self.command, str) or not self.command:
                raise ValueError(
                    'command is an argv list, e.g. ["/usr/local/bin/drain", '
                    '"--grace", "60"] (set shell = true for a shell line)'
                )
            program = self.command[0]
            if _CMD_PROGRAM.search(program.strip().strip('"')):
                for word in self.command[1:]:
                    if found := EVENT_DATA_IN_CMD_LINE.search(word):
                        raise ValueError(
                            f"{found.group()} in the arguments of {program}: cmd.exe expands it "
                            "before parsing, so event text such as '& del ...' would run; "
                            "read the record on standard input"
                        )
        problem = process.executable_problem(program)
        if problem is not None:
            raise ValueError(problem)
        return self

    def argv(self) -> list[str]:
        if isinstance(self.command, str):
            return process.shell_argv(self.command)
        return list(self.command)


class EventMatch(_Model):
    """What a rule matches in an event itself, the one vocabulary of the agent's rules and the
    collector's (``[collector.preview_acknowledge]``): every condition given must hold; an empty
    list or an absent bound matches anything."""

    name: str = ""
    event_types: EventTypes = Field(default_factory=list)
    event_sources: EventSources = Field(default_factory=list)
    event_statuses: EventStatuses = Field(default_factory=list)
    min_duration: int | None = None  # DurationInSeconds, inclusive; an event without one never
    max_duration: int | None = None  # matches a rule that bounds it

    @model_validator(mode="after")
    def _durations(self) -> EventMatch:
        lo, hi = self.min_duration, self.max_duration
        if lo is not None and hi is not None and lo > hi:
            raise ValueError(f"min_duration ({lo}) is above max_duration ({hi})")
        return self


class RuleConfig(EventMatch):
    """``[[policy.rules]]``: what to match (``EventMatch``, and this VM's part in the event) and
    what to do."""

    affects_this_vm: bool | None = None
    min_resources: int | None = Field(None, ge=0)  # how many VMs Resources names
    max_resources: int | None = Field(None, ge=0)
    pre_hooks: list[str] = Field(default_factory=list)  # on FirstSeen, in order
    post_hooks: list[str] = Field(default_factory=list)  # on Removed, in order
    # With pre_hooks, the post_hooks run only for an event whose pre-hooks ran here (an
    # "uncordon" must not undo a drain that never happened); true: they run alone too.
    post_hooks_alone: bool = False
    rerun_on_update: bool = False  # run the pre_hooks again on each Updated
    approve: Approve = "never"
    multi_vm: MultiVm = "never"  # an event naming other VMs too: "leader" = the first name approves

    @model_validator(mode="after")
    def _consistent(self) -> RuleConfig:
        lo, hi = self.min_resources, self.max_resources
        if lo is not None and hi is not None and lo > hi:
            raise ValueError(f"min_resources ({lo}) is above max_resources ({hi})")
        acts = self.pre_hooks or self.post_hooks or self.approve != "never"
        if self.affects_this_vm is False and acts:
            raise ValueError(
                "affects_this_vm = false with hooks or an approval: the agent acts "
                "only on events that affect this VM"
            )
        return self

    @property
    def acts(self) -> bool:
        return bool(self.pre_hooks or self.post_hooks or self.approve != "never")


# Named rule sets a configuration falls back to (``[policy] preset = "..."``), placed after the
# configured rules (the user's rules first). ``microsoft`` reproduces Microsoft's sample policy
# (scheduled-events-api.md, "Approving"): approve ``User`` events and ``Freeze`` events of 0 to 8
# seconds at once; the sample's "custom handling" is the configured rules, tried before these.
# Approval releases an event for every VM
# it names, so these rules approve from one VM only, the one named first in ``Resources``
# (``leader``): the same effect as the sample's every-VM approval, without a POST from each.
PRESETS: dict[str, tuple[RuleConfig, ...]] = {
    "observe": (),
    "microsoft": (
        RuleConfig(
            name="microsoft: user-initiated",
            event_sources=["User"],
            event_statuses=[EventStatus.SCHEDULED],
            affects_this_vm=True,
            approve="at-once",
            multi_vm="leader",
        ),
        RuleConfig(
            name="microsoft: short freeze",
            event_types=["Freeze"],
            event_statuses=[EventStatus.SCHEDULED],
            min_duration=0,
            max_duration=8,
            affects_this_vm=True,
            approve="at-once",
            multi_vm="leader",
        ),
    ),
}


class PolicyConfig(_Model):
    """``[policy]``: the user's ``rules`` first, then the preset's, in order; the first rule
    that matches an event decides for the whole event (docs/policy.md, "Which rule")."""

    preset: Literal["observe", "microsoft"] = "observe"
    dry_run: bool = False  # log and count each decision; run and approve nothing
    hooks: dict[str, HookConfig] = Field(default_factory=dict)
    rules: list[RuleConfig] = Field(default_factory=list)
    service: ServiceConfig | None = None  # early approval across a service (opt-in)

    @field_validator("hooks")
    @classmethod
    def _hook_names(cls, v: dict[str, HookConfig]) -> dict[str, HookConfig]:
        for name in v:
            if not HOOK_NAME.match(name):
                raise ValueError(
                    f"hook name {name!r}: letters, digits, '.', '_' and '-' only (at most 64)"
                )
        return v

    @model_validator(mode="after")
    def _hooks_defined(self) -> PolicyConfig:
        for i, rule in enumerate(self.rules, 1):
            if rule.approve == "service" and self.service is None:
                raise ValueError(
                    f'rule {i} says approve = "service": configure the service\'s '
                    "coordinator under [policy.service]"
                )
            for name in rule.pre_hooks + rule.post_hooks:
                if name not in self.hooks:
                    label = f" ({rule.name})" if rule.name else ""
                    raise ValueError(
                        f"rule {i}{label} names hook {name!r}, which is not defined "
                        f"under [policy.hooks.{name}]"
                    )
        return self

    def effective_rules(self) -> list[RuleConfig]:
        return list(self.rules) + list(PRESETS[self.preset])

    @property
    def acts(self) -> bool:
        """Whether any rule does anything (the default does not: no thread, no cost)."""
        return any(r.acts for r in self.effective_rules())
