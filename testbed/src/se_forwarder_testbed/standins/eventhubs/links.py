"""The namespace's AMQP endpoint: connections, sessions and links opened and closed as the peer
asks, sender attaches to a hub or a partition (refused when unknown or unauthorized), receiver
attaches to a partition of a consumer group (:mod:`.readers`), and each complete delivery routed
to ``$cbs``, ``$management`` or its hub."""

from __future__ import annotations

import uuid
from collections.abc import Callable

from proton import Delivery, Event, Link, Message, int32

from .auth import Grant, authorized, entity_path
from .connection import Conn
from .management import Answer, put_token, read
from .namespace import Namespace
from .outcomes import DECODE_ERROR, NOT_FOUND, UNAUTHORIZED, refuse, settle
from .readers import Readers
from .transfers import Transfers

CBS, MANAGEMENT = "$cbs", "$management"
_CREDIT = 500

Request = Callable[[Namespace, list[Grant], Message], Answer]
_NODES: dict[str, Request] = {CBS: put_token, MANAGEMENT: read}


class Endpoint:
    """Serves proton's events for every connection of the namespace."""

    def __init__(self, ns: Namespace, transfers: Transfers) -> None:
        self.ns = ns
        self.transfers = transfers
        self.readers = Readers(ns)

    def process(self, c: Conn) -> None:
        """Handle every event proton has collected for ``c``, then feed its readers."""
        ev = c.collector.peek()
        while ev is not None and not c.closed:
            self._dispatch(c, ev)
            c.collector.pop()
            ev = c.collector.peek()
        if not c.closed:
            self.readers.feed(c)

    def _dispatch(self, c: Conn, ev: Event) -> None:
        """One event; proton's accessors are typed optional, each is present for its own type."""
        t = ev.type
        if t == Event.CONNECTION_REMOTE_OPEN and (conn := ev.connection) is not None:
            conn.container = f"se-forwarder-eventhubs-standin-{uuid.uuid4().hex[:8]}"
            conn.hostname = self.ns.hostname
            conn.open()
        elif t == Event.SESSION_REMOTE_OPEN and (session := ev.session) is not None:
            session.open()
        elif t == Event.LINK_REMOTE_OPEN and (link := ev.link) is not None:
            self._on_attach(c, link)
        elif t == Event.DELIVERY and (d := ev.delivery) is not None:
            if d.link.is_receiver and d.readable and not d.partial and not d.settled:
                self._on_delivery(c, d)
        elif t == Event.LINK_REMOTE_CLOSE and (link := ev.link) is not None:
            self._on_detach(c, link)
        elif t == Event.SESSION_REMOTE_CLOSE and (session := ev.session) is not None:
            if session.state & session.LOCAL_ACTIVE:
                session.close()
        elif (
            t == Event.CONNECTION_REMOTE_CLOSE
            and (conn := ev.connection) is not None
            and conn.state & conn.LOCAL_ACTIVE
        ):
            conn.close()

    def _on_detach(self, c: Conn, link: Link) -> None:
        c.hub_links.pop(link.name, None)
        self.readers.detach(link)
        for k, v in list(c.reply_links.items()):
            if v.name == link.name:
                del c.reply_links[k]
        if link.state & Link.LOCAL_ACTIVE:
            link.close()

    # ------------------------------------------------------------------------------ attaches

    def _on_attach(self, c: Conn, link: Link) -> None:
        link.source.copy(link.remote_source)
        link.target.copy(link.remote_target)
        if link.is_sender:  # the client's receiver: replies of $cbs / $management, or events
            address = link.remote_source.address or ""
            if address in _NODES:
                c.reply_links[address] = link
                link.snd_settle_mode = Link.SND_SETTLED
                link.open()
            else:
                self.readers.attach(c, link, entity_path(address).split("/"))
            return
        address = link.remote_target.address or ""
        if address in _NODES:
            link.open()
            link.flow(_CREDIT)
        else:
            self._attach_to_hub(c, link, entity_path(address))

    def _attach_to_hub(self, c: Conn, link: Link, entity: str) -> None:
        """A sender to ``hub`` or ``hub/partitions/N``: it needs the Send right on the hub."""
        parts = entity.split("/")
        hub = self.ns.hub(parts[0])
        partition: str | None = None
        if hub is None or (len(parts) > 1 and not (len(parts) == 3 and parts[1] == "partitions")):
            refuse(
                link,
                NOT_FOUND,
                f"The messaging entity '{self.ns.resource(entity)}' could not be found.",
            )
            return
        if len(parts) == 3:
            if not parts[2].isdigit() or int(parts[2]) >= self.ns.hubs[hub]:
                refuse(
                    link,
                    NOT_FOUND,
                    f"The specified partition '{parts[2]}' is invalid for event hub '{hub}'.",
                )
                return
            partition = str(int(parts[2]))
        if not authorized(c.grants, hub.lower(), "Send"):
            self.ns.stats["refused_attaches"] += 1
            refuse(
                link,
                UNAUTHORIZED,
                "Unauthorized access. 'Send' claim(s) are required to "
                f"perform this operation. Resource: '{self.ns.resource(hub)}'.",
            )
            return
        link.max_message_size = self.ns.max_message_size
        c.hub_links[link.name] = (hub, partition)
        link.open()
        link.flow(_CREDIT)

    # ------------------------------------------------------------------------------ deliveries

    def _on_delivery(self, c: Conn, d: Delivery) -> None:
        link = d.link
        data = link.recv(d.pending) or b""
        link.advance()
        fmt = c.scanner.next_format(link.name)
        if link.credit < _CREDIT // 2:
            link.flow(_CREDIT - link.credit)
        address = link.remote_target.address or ""
        if d.aborted:
            d.settle()
            return
        if address in _NODES:
            self._on_request(c, address, d, data)
        elif link.name in c.hub_links:
            self.transfers.receive(c, d, data, fmt, *c.hub_links[link.name])
        else:
            settle(d, Delivery.REJECTED, NOT_FOUND, "link is not attached to an entity")

    def _on_request(self, c: Conn, node: str, d: Delivery, data: bytes) -> None:
        """A request to ``$cbs`` or ``$management``: settled Accepted once decoded (Rejected
        when not), then answered on the client's reply link."""
        msg = Message()
        try:
            msg.decode(data)
        except Exception:
            settle(d, Delivery.REJECTED, DECODE_ERROR, "message could not be decoded")
            return
        settle(d, Delivery.ACCEPTED)
        self._reply(c, node, msg, _NODES[node](self.ns, c.grants, msg))

    @staticmethod
    def _reply(c: Conn, node: str, request: Message, answer: Answer) -> None:
        link = c.reply_links.get(node)
        if link is None:
            return
        status, description = int32(answer.status), answer.description
        props = {"status-code": status, "status-description": description}
        if node == MANAGEMENT:
            props = {"statusCode": status, "statusDescription": description, **props}
        reply = Message(body=answer.body, properties=props, correlation_id=request.id)
        dlv = link.delivery(str(next(c.tag_seq)))
        link.send(reply.encode())
        link.advance()
        dlv.settle()
