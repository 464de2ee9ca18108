"""Named rule sets a configuration can start from (``[policy] preset = "..."``), placed before the
configured rules.

``microsoft`` reproduces Microsoft's sample policy (scheduled-events-api.md, "Approving"):
approve ``User`` events and ``Freeze`` events of 0 to 8 seconds at once; everything else falls
through to the configured rules (the hooks). Approval releases an event for every VM it names,
so these rules approve from one VM only, the one named first in ``Resources`` (``leader``): the
same effect as the sample's every-VM approval, without a POST from each.
"""

from __future__ import annotations

from ..model import EventStatus
from .config import RuleConfig

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


def preset_rules(name: str) -> list[RuleConfig]:
    return list(PRESETS[name])
