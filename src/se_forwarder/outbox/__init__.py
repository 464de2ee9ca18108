"""Durable state and outbox: the tracker state and the rows it produced, in one SQLite database."""

from .row import OutboxRow
from .store import Store

__all__ = ["OutboxRow", "Store"]
