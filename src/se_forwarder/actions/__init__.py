"""Acting on events: the policy's decisions, hooks and approvals, beside the poll loop."""

from .controller import Actions, ActionStats

__all__ = ["ActionStats", "Actions"]
