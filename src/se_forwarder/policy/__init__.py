"""The policy: ordered rules that say which hooks run and whether to approve, and the presets
they start from (``config``), the decision for one event (``match``) and the policy in words
(``words``)."""

from .config import HookConfig, PolicyConfig, RuleConfig
from .match import Decision, Facts, Policy, decide

__all__ = ["Decision", "Facts", "HookConfig", "Policy", "PolicyConfig", "RuleConfig", "decide"]
