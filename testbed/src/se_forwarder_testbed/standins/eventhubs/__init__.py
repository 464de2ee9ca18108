"""Event Hubs stand-in: an AMQP 1.0 listener (python-qpid-proton) for the unmodified azure-eventhub
SDK.

What it does, as the service does (see ``shared/spec/azure-sinks.md``):

* SASL ANONYMOUS, AMQP open/begin; plain AMQP or TLS (the generated certificate).
* CBS on ``$cbs``: ``put-token`` with a SAS token (HMAC-SHA256 with a configured key) or a JWT from
  the :class:`~se_forwarder_testbed.standins.tokens.TokenAuthority` (audience
  ``https://eventhubs.azure.net``). A bad or expired token gets 401; a valid token is accepted
  (202) and remembered on the connection for the entity it names. A sender attach to a hub
  without an accepted token that carries the ``Send`` right (a SAS policy with Send, or a JWT
  whose subject holds "Azure Event Hubs Data Sender") is refused with
  ``amqp:unauthorized-access``, as the service refuses it.
* ``$management`` READ of ``com.microsoft:eventhub`` and ``com.microsoft:partition``.
* Sender links to ``amqps://host/hub`` and ``.../hub/Partitions/N``; the attach carries the
  configured ``max_message_size``. Batched transfers (format ``0x80013700``) are unpacked into one
  event per Data section; plain messages are one event each. Too large → rejected with
  ``amqp:link:message-size-exceeded``.
* Fault injection: rejected deliveries (``com.microsoft:server-busy``), dropped connections (now,
  or when the next transfers arrive), slow acceptance.
* Every performative leaves padded to its full field count (see
:mod:`se_forwarder_testbed.standins.amqp_frames`).

Single thread, a selector loop around proton's engine (``Transport``/``Connection``/``Collector``);
TLS is done with :mod:`ssl` memory BIOs, so proton only ever sees the plain AMQP stream.

Modules: ``standin`` (the public API), ``namespace`` (hubs, limits, counters), ``auth`` (SAS,
JWT, grants), ``loop`` (the thread, sockets, timers), ``connection`` (one connection's TLS and
bytes), ``links`` (AMQP events, attaches, routing of deliveries), ``management`` (``$cbs`` and
``$management`` requests), ``transfers`` (a hub transfer: faults, limit, storing), ``faults``,
``store`` (partitions and queries), ``events`` (stored events, message sections), ``outcomes``
(error conditions). ``python -m se_forwarder_testbed.standins.eventhubs`` runs one.
"""

from __future__ import annotations

from .auth import make_sas_token
from .events import ReceivedEvent
from .outcomes import MESSAGE_SIZE_EXCEEDED, SERVER_BUSY, UNAUTHORIZED
from .standin import DEFAULT_MAX_MESSAGE_SIZE, EventHubsStandIn
from .store import partition_for_key

__all__ = [
    "DEFAULT_MAX_MESSAGE_SIZE",
    "MESSAGE_SIZE_EXCEEDED",
    "SERVER_BUSY",
    "UNAUTHORIZED",
    "EventHubsStandIn",
    "ReceivedEvent",
    "make_sas_token",
    "partition_for_key",
]
