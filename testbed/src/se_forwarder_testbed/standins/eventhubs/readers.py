"""Receive links: a consumer's attach to ``hub/ConsumerGroups/<group>/Partitions/<n>``, the
service's rules for who may read, and the events sent on each link as its credit allows.

The rules, as Event Hubs applies them per partition and consumer group:

* the consumer group must exist (``$Default`` always does): else ``amqp:not-found``;
* the Listen right on the hub is needed (a SAS policy with Listen, or a JWT whose subject holds
  "Azure Event Hubs Data Receiver"): else ``amqp:unauthorized-access``;
* at most 5 concurrent readers without an owner level (epoch): the 6th is refused with
  ``amqp:resource-limit-exceeded``;
* a reader with an owner level takes the partition: every reader without one, and every reader
  with a lower or equal level, is detached with ``amqp:link:stolen``; a reader without a level,
  or with a lower one, cannot attach while a higher one reads (``amqp:link:stolen`` too).

Events go out pre-settled (the service keeps no per-message state: a consumer's progress is its
own checkpoint), each stamped by :mod:`.delivered`.
"""

from __future__ import annotations

from dataclasses import dataclass

from proton import Link, symbol

from .auth import authorized
from .connection import Conn
from .delivered import encode, runtime_info
from .namespace import Namespace
from .outcomes import NOT_FOUND, UNAUTHORIZED, error_condition, refuse
from .positions import BadPosition, parse, selector, start

LINK_STOLEN = "amqp:link:stolen"
RESOURCE_LIMIT = "amqp:resource-limit-exceeded"
MAX_READERS = 5  # per partition and consumer group, without an owner level
EPOCH = "com.microsoft:epoch"
RUNTIME_METRIC = "com.microsoft:enable-receiver-runtime-metric"


@dataclass
class Reader:
    conn: Conn
    link: Link
    hub: str
    group: str
    partition: str
    epoch: int | None
    next_seq: int
    runtime_metric: bool

    @property
    def key(self) -> tuple[str, str, str]:
        return self.hub, self.group.lower(), self.partition

    @property
    def alive(self) -> bool:
        return not self.conn.closed and not (self.link.state & Link.LOCAL_CLOSED)


def _filters(link: Link) -> object:
    """The filter set of the peer's source, as Python values."""
    data = link.remote_source.filter
    data.rewind()
    return data.get_object() if data.next() is not None else None


def _stolen(link: Link, description: str) -> None:
    link.condition = error_condition(LINK_STOLEN, description)
    link.close()


class Readers:
    """Every receive link of the namespace, by partition and consumer group."""

    def __init__(self, ns: Namespace) -> None:
        self.ns = ns
        self._by_key: dict[tuple[str, str, str], list[Reader]] = {}
        self._by_link: dict[int, Reader] = {}

    def attach(self, c: Conn, link: Link, parts: list[str]) -> None:
        """Open (or refuse) ``link``, whose source named the entity ``parts``
        (``[hub, "consumergroups", group, "partitions", n]``, lower-cased)."""
        ns = self.ns
        hub = ns.hub(parts[0]) if parts else None
        if (
            hub is None
            or len(parts) != 5
            or parts[1] != "consumergroups"
            or parts[3] != "partitions"
        ):
            refuse(
                link,
                NOT_FOUND,
                f"The messaging entity '{ns.resource('/'.join(parts))}' could not be found.",
            )
            return
        group = ns.consumer_group(hub, parts[2])
        if group is None:
            refuse(
                link,
                NOT_FOUND,
                "The messaging entity "
                f"'{ns.resource(f'{hub}/consumergroups/{parts[2]}')}' could not be found.",
            )
            return
        if not parts[4].isdigit() or int(parts[4]) >= ns.hubs[hub]:
            refuse(
                link,
                NOT_FOUND,
                f"The specified partition '{parts[4]}' is invalid for event hub '{hub}'.",
            )
            return
        if not authorized(c.grants, "/".join(parts), "Listen"):
            ns.stats["refused_attaches"] += 1
            refuse(
                link,
                UNAUTHORIZED,
                "Unauthorized access. 'Listen' claim(s) are required to "
                f"perform this operation. Resource: '{ns.resource(hub)}'.",
            )
            return
        partition = str(int(parts[4]))
        try:
            first = start(ns.store, hub, partition, parse(selector(_filters(link))))
        except BadPosition as exc:
            refuse(link, exc.condition, str(exc))
            return
        props = link.remote_properties or {}
        epoch = props.get(symbol(EPOCH), props.get(EPOCH))
        reader = Reader(
            c,
            link,
            hub,
            group,
            partition,
            None if epoch is None else int(epoch),
            first,
            RUNTIME_METRIC in c.scanner.capabilities(link.name),
        )
        if self._admit(reader):
            link.snd_settle_mode = Link.SND_SETTLED
            link.open()
            self._by_key.setdefault(reader.key, []).append(reader)
            self._by_link[id(link)] = reader
            ns.stats["receivers"] += 1

    def _admit(self, new: Reader) -> bool:
        """Apply the owner-level and reader-count rules; detach whom ``new`` displaces."""
        current = [r for r in self._by_key.get(new.key, []) if r.alive]
        self._by_key[new.key] = current
        where = f"partition '{new.partition}' of consumer group '{new.group}'"
        higher = [
            r.epoch
            for r in current
            if r.epoch is not None and (new.epoch is None or r.epoch > new.epoch)
        ]
        if higher:
            refuse(
                new.link,
                LINK_STOLEN,
                f"Receiver with a higher epoch '{max(higher)}' already "
                f"exists on {where}. Receiver with epoch '{new.epoch}' cannot be created. Make "
                "sure you are creating receivers with increasing epoch values.",
            )
            return False
        if new.epoch is None:
            if len(current) >= MAX_READERS:
                refuse(
                    new.link,
                    RESOURCE_LIMIT,
                    "Exceeded the maximum number of allowed "
                    f"receivers per partition in a consumer group which is {MAX_READERS}. "
                    f"({where})",
                )
                return False
            return True
        for old in current:
            _stolen(
                old.link,
                f"New receiver with higher epoch of '{new.epoch}' is created hence "
                f"current receiver with epoch '{old.epoch}' is getting disconnected ({where}).",
            )
            self.detach(old.link)
            self.ns.stats["stolen_links"] += 1
        return True

    def detach(self, link: Link) -> None:
        reader = self._by_link.pop(id(link), None)
        if reader is not None:
            group = self._by_key.get(reader.key, [])
            if reader in group:
                group.remove(reader)

    def is_reader(self, link: Link) -> bool:
        return id(link) in self._by_link

    def feed(self, c: Conn) -> None:
        """Send each of ``c``'s readers what its credit allows."""
        for reader in [r for r in self._by_link.values() if r.conn is c]:
            link = reader.link
            if not reader.alive or link.credit <= 0:
                continue
            events = self.ns.store.read(reader.hub, reader.partition, reader.next_seq, link.credit)
            if not events:
                continue
            extra = (
                runtime_info(*self.ns.store.last_enqueued(reader.hub, reader.partition))
                if reader.runtime_metric
                else b""
            )
            for e in events:
                dlv = link.delivery(str(next(c.tag_seq)))
                link.send(encode(e, extra))
                link.advance()
                dlv.settle()
                reader.next_seq = e.sequence_number + 1
            self.ns.stats["delivered"] += len(events)
