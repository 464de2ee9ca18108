"""The emulated namespace apart from its network: hubs, credentials, the message size limit,
the stored events, the injected faults and the counters tests read."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from .auth import Credentials
from .faults import Faults
from .store import EventStore

STATS = (
    "connections",
    "transfers",
    "accepted",
    "rejected",
    "dropped_connections",
    "put_tokens",
    "refused_tokens",
    "refused_attaches",
    "management_requests",
    "receivers",
    "stolen_links",
    "delivered",
)
DEFAULT_CONSUMER_GROUP = "$Default"


@dataclass
class Namespace:
    """The state every part of the stand-in shares (the loop aside)."""

    hostname: str
    hubs: dict[str, int]  # hub name -> partition count
    credentials: Credentials
    max_message_size: int
    created_at: float = field(default_factory=time.time)
    store: EventStore = field(default_factory=EventStore)
    faults: Faults = field(default_factory=Faults)
    stats: dict[str, int] = field(default_factory=lambda: dict.fromkeys(STATS, 0))
    consumer_groups: dict[str, set[str]] = field(default_factory=dict)  # hub -> extra groups

    def hub(self, name: str) -> str | None:
        """The configured hub called ``name``, whatever its case (None: no such hub)."""
        name = name.lower()
        return next((h for h in self.hubs if h.lower() == name), None)

    def consumer_group(self, hub: str, name: str) -> str | None:
        """The consumer group of ``hub`` called ``name``, whatever its case (None: none)."""
        for group in (DEFAULT_CONSUMER_GROUP, *sorted(self.consumer_groups.get(hub, ()))):
            if group.lower() == name.lower():
                return group
        return None

    def resource(self, entity: str) -> str:
        """An entity's URI as the service names it in error messages."""
        return f"sb://{self.hostname}/{entity}"
