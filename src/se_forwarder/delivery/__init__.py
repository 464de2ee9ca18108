"""Delivery: one worker per sink draining the outbox (``worker``), the pool that starts and
drains them (``pool``), the one backoff (``backoff``) and the dead-letter file."""

from .dead_letters import DeadLetters
from .pool import DeliveryPool
from .worker import DeliveryWorker, SinkStats

__all__ = ["DeadLetters", "DeliveryPool", "DeliveryWorker", "SinkStats"]
