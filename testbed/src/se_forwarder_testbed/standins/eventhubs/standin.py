"""The stand-in as tests and the bench use it: configuration, start and stop, the addresses and
credentials a client needs, fault injection and the queries of what arrived."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Self

from proton import Message, symbol

from ..tls import TlsFiles
from ..tokens import TokenAuthority
from .auth import Credentials, SasKeys, make_sas_token
from .connection import HOSTILE_MODES
from .events import PARTITION_KEY, ReceivedEvent
from .links import Endpoint
from .loop import Loop
from .namespace import Namespace
from .outcomes import SERVER_BUSY
from .transfers import Transfers

DEFAULT_MAX_MESSAGE_SIZE = 1024 * 1024  # Standard tier


class EventHubsStandIn:
    """An Event Hubs namespace on localhost for the real azure-eventhub SDK.

    ``hubs`` maps hub name → partition count. ``sas_keys`` maps a policy name to its key, or to
    ``(key, rights)`` with rights from {"Send", "Listen", "Manage"} (a bare key has all three).
    ``allowed_subjects``: JWT subjects holding "Azure Event Hubs Data Sender", ``receiver_subjects``
    those holding "Azure Event Hubs Data Receiver" (None = every subject with a valid token).
    Without a ``token_authority`` JWTs are refused. ``consumer_groups`` maps a hub to the consumer
    groups it has besides ``$Default``.
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        tls: TlsFiles | None = None,
        *,
        hubs: dict[str, int] | None = None,
        sas_keys: SasKeys | None = None,
        token_authority: TokenAuthority | None = None,
        allowed_subjects: Iterable[str] | None = None,
        receiver_subjects: Iterable[str] | None = None,
        consumer_groups: dict[str, Iterable[str]] | None = None,
        max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE,
        hostname: str = "localhost",
    ) -> None:
        self.host = host
        self._requested_port = port
        self.tls = tls
        self._ns = Namespace(
            hostname,
            dict(hubs if hubs is not None else {"scheduled-events": 4}),
            Credentials(sas_keys, token_authority, allowed_subjects, receiver_subjects),
            max_message_size,
        )
        for hub, groups in (consumer_groups or {}).items():
            self.add_consumer_group(hub, *groups)
        self._loop = Loop(self._ns.stats, tls.server_context() if tls else None)
        self._ns.store.on_added(self._loop.wake)  # readers get new events at once
        self._endpoint = Endpoint(self._ns, Transfers(self._ns, self._loop))
        self.port = 0

    # ------------------------------------------------------------------------------ lifecycle

    def start(self) -> Self:
        if not self._loop.started:
            self.port = self._loop.start(self.host, self._requested_port, self._endpoint.process)
        return self

    def stop(self, timeout: float = 5.0) -> None:
        self._loop.stop(timeout)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def running(self) -> bool:
        return self._loop.running

    @property
    def open_connections(self) -> int:
        return self._loop.open_connections

    @property
    def error(self) -> BaseException | None:
        """The exception that stopped the loop, if one did."""
        return self._loop.error

    @property
    def errors(self) -> list[str]:
        """Tracebacks of failures while serving a connection (that connection was closed)."""
        return self._loop.errors

    # ------------------------------------------------------------------------------ the namespace

    @property
    def hostname(self) -> str:
        return self._ns.hostname

    @property
    def hubs(self) -> dict[str, int]:
        return self._ns.hubs

    @property
    def created_at(self) -> float:
        return self._ns.created_at

    @property
    def stats(self) -> dict[str, int]:
        return self._ns.stats

    @property
    def max_message_size(self) -> int:
        return self._ns.max_message_size

    @property
    def token_authority(self) -> TokenAuthority | None:
        return self._ns.credentials.token_authority

    @property
    def allowed_subjects(self) -> frozenset[str] | None:
        return self._ns.credentials.allowed_subjects

    @allowed_subjects.setter
    def allowed_subjects(self, subjects: Iterable[str] | None) -> None:
        self._ns.credentials.allowed_subjects = None if subjects is None else frozenset(subjects)

    def add_consumer_group(self, hub: str, *names: str) -> None:
        """Create consumer groups on ``hub`` (as the portal or Bicep would)."""
        name = self._ns.hub(hub)
        if name is None:
            raise KeyError(f"no hub {hub!r}")
        self._ns.consumer_groups.setdefault(name, set()).update(names)

    def consumer_groups(self, hub: str) -> list[str]:
        name = self._ns.hub(hub) or hub
        return ["$Default", *sorted(self._ns.consumer_groups.get(name, ()))]

    # ------------------------------------------------------------------------------ addresses

    @property
    def namespace(self) -> str:
        """``host:port`` (what ``fully_qualified_namespace`` takes with
        ``custom_endpoint_address``)."""
        return f"{self.hostname}:{self.port}"

    @property
    def endpoint(self) -> str:
        """For ``custom_endpoint_address`` (TLS)."""
        return f"sb://{self.hostname}:{self.port}"

    def connection_string(self, hub: str | None = None, key_name: str | None = None) -> str:
        """A SAS connection string. Plain listener: ``UseDevelopmentEmulator=true`` (AMQP without
        TLS). TLS listener: also pass ``custom_endpoint_address=standin.endpoint`` and
        ``connection_verify=<ca.pem>`` to the SDK."""
        key_name, key = self._ns.credentials.key(key_name)
        parts = [
            f"Endpoint={self.endpoint}",
            f"SharedAccessKeyName={key_name}",
            f"SharedAccessKey={key}",
        ]
        if hub:
            parts.append(f"EntityPath={hub}")
        if not self.tls:
            parts.append("UseDevelopmentEmulator=true")
        return ";".join(parts)

    def sas_token(
        self, hub: str | None = None, key_name: str | None = None, expiry: float | None = None
    ) -> str:
        key_name, key = self._ns.credentials.key(key_name)
        return make_sas_token(f"{self.endpoint}/{hub or ''}", key_name, key, expiry)

    # ------------------------------------------------------------------------------ fault injection

    def reject_next(
        self, n: int = 1, condition: str = SERVER_BUSY, description: str | None = None
    ) -> None:
        """Reject the next ``n`` transfers to a hub (nothing stored) with ``condition``."""
        self._ns.faults.reject_next(n, condition, description)

    def drop_connections(self) -> None:
        """Close every client connection now, abruptly (no AMQP close)."""
        self._loop.drop_connections()

    def drop_next(self, n: int = 1) -> None:
        """Drop the connection carrying each of the next ``n`` transfers to a hub, before it is
        stored or settled (the client never learns whether it arrived: it did not)."""
        self._ns.faults.drop_next(n)

    def set_accept_delay(self, seconds: float) -> None:
        """Settle hub transfers only after ``seconds`` (slow acceptance)."""
        self._ns.faults.set_accept_delay(seconds)

    def set_max_message_size(self, size: int) -> None:
        """Change the limit enforced on transfers, and announced on later attaches."""
        self._ns.max_message_size = int(size)

    def hostile_next(self, mode: str, n: int = 1) -> None:
        """Serve the next ``n`` connections as a hostile peer would: ``"silent"`` (TLS, then not
        a byte of AMQP: the client waits for the protocol header forever) or ``"huge-frame"``
        (the protocol header, then a frame announcing 2 GiB, 4 MiB of it sent)."""
        if mode not in HOSTILE_MODES:
            raise ValueError(f"mode must be one of {HOSTILE_MODES}")
        self._loop.hostile_next(mode, n)

    def clear_faults(self) -> None:
        self._ns.faults.clear()
        self._loop.clear_hostile()

    # ------------------------------------------------------------------------------ publishing

    def inject(
        self,
        hub: str,
        body: bytes | str,
        *,
        partition: str | int | None = None,
        partition_key: str | None = None,
        properties: dict[str, Any] | None = None,
        content_type: str | None = "application/json",
    ) -> ReceivedEvent:
        """Enqueue one event as another publisher would (Event Grid delivering to the hub): one
        AMQP message with ``body`` as its Data section. Without ``partition`` the service picks
        one (by ``partition_key``, else round robin)."""
        name = self._ns.hub(hub)
        if name is None:
            raise KeyError(f"no hub {hub!r}")
        msg = Message(
            body=body.encode("utf-8") if isinstance(body, str) else bytes(body),
            inferred=True,
            content_type=content_type,
            properties=properties or None,
            annotations={symbol(PARTITION_KEY): partition_key} if partition_key else None,
        )
        pid = None if partition is None else str(int(partition))
        if pid is not None and int(pid) >= self._ns.hubs[name]:
            raise ValueError(f"hub {name} has no partition {pid}")
        (event,) = self._ns.store.add(
            name, self._ns.hubs[name], pid, [msg.encode()], partition_key, 0
        )
        return event

    # ------------------------------------------------------------------------------ queries

    @property
    def events(self) -> list[ReceivedEvent]:
        return self._ns.store.events

    def events_for(
        self, hub: str | None = None, partition_id: str | int | None = None
    ) -> list[ReceivedEvent]:
        return self._ns.store.events_for(hub, partition_id)

    def by_property(self, name: str, value: Any = ...) -> list[ReceivedEvent]:
        """Events whose application property ``name`` exists (and equals ``value`` if given)."""
        return self._ns.store.by_property(name, value)

    def by_partition(self, hub: str | None = None) -> dict[str, list[ReceivedEvent]]:
        return self._ns.store.by_partition(hub)

    def wait_for(
        self, count: int, timeout: float = 10.0, hub: str | None = None
    ) -> list[ReceivedEvent]:
        """Wait until at least ``count`` events (of ``hub``) are stored; return them all.
        Raises TimeoutError saying how many arrived."""
        return self._ns.store.wait_for(count, timeout, hub)

    def clear(self) -> None:
        self._ns.store.clear()
