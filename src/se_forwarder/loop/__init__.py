"""The agent's one hot path: the poll loop, and the chores it runs between polls."""

from .chores import Chore, Chores
from .poll import PollLoop

__all__ = ["Chore", "Chores", "PollLoop"]
