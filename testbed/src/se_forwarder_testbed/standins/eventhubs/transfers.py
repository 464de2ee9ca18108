"""A transfer on a hub link: injected faults decide first, then the size limit; what passes is
unpacked into events, stored and accepted (after the injected delay, if any)."""

from __future__ import annotations

from collections.abc import Callable

from proton import Delivery

from .connection import Conn
from .events import unpack_transfer
from .loop import Loop
from .namespace import Namespace
from .outcomes import DECODE_ERROR, MESSAGE_SIZE_EXCEEDED, settle


class Transfers:
    """Takes in the transfers on hub links; ``loop`` closes, pumps and delays for it."""

    def __init__(self, ns: Namespace, loop: Loop) -> None:
        self.ns = ns
        self.loop = loop

    def receive(
        self, c: Conn, d: Delivery, data: bytes, fmt: int, hub: str, partition: str | None
    ) -> None:
        """Handle one complete transfer of ``data`` (message format ``fmt``) to ``hub``."""
        ns = self.ns
        ns.stats["transfers"] += 1
        verdict = ns.faults.take()
        limit = ns.max_message_size
        if verdict.drop:
            self.loop.close(c, dropped=True)
            return
        if verdict.reject is not None:
            self._reject(c, d, verdict.delay, *verdict.reject)
            return
        if len(data) > limit:
            self._reject(
                c,
                d,
                verdict.delay,
                MESSAGE_SIZE_EXCEEDED,
                f"The received message (size: {len(data)} bytes) exceeds the limit "
                f"({limit} bytes) currently allowed on the link.",
            )
            return
        try:
            events, key = unpack_transfer(data, fmt)
        except Exception as exc:
            self._reject(
                c, d, verdict.delay, DECODE_ERROR, f"The message could not be decoded: {exc}"
            )
            return
        self._finish(
            c,
            d,
            verdict.delay,
            Delivery.ACCEPTED,
            None,
            None,
            lambda: ns.store.add(hub, ns.hubs[hub], partition, events, key, c.id),
        )

    def _reject(self, c: Conn, d: Delivery, delay: float, condition: str, description: str) -> None:
        self.ns.stats["rejected"] += 1
        self._finish(c, d, delay, Delivery.REJECTED, condition, description)

    def _finish(
        self,
        c: Conn,
        d: Delivery,
        delay: float,
        state: int,
        condition: str | None,
        description: str | None,
        on_accept: Callable[[], object] | None = None,
    ) -> None:
        """Settle ``d`` now or after ``delay`` (storing first, on acceptance), unless the
        connection is gone by then."""

        def done() -> None:
            if c.closed:
                return
            if on_accept is not None:
                on_accept()
                self.ns.stats["accepted"] += 1
            settle(d, state, condition, description)
            self.loop.pump(c)

        if delay > 0:
            self.loop.schedule(delay, done)
        else:
            done()
