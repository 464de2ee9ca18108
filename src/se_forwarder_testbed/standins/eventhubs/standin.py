"""The stand-in as tests and the bench use it: configuration, start and stop, the addresses and
credentials a client needs, fault injection and the queries of what arrived."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Self

from ..tls import TlsFiles
from ..tokens import TokenAuthority
from .auth import Credentials, SasKeys, make_sas_token
from .events import ReceivedEvent
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
    ``allowed_subjects``: JWT subjects holding "Azure Event Hubs Data Sender" (None = every subject
    with a valid token). Without a ``token_authority`` JWTs are refused.
    """

    def __init__(self, host: str = "127.0.0.1", port: int = 0, tls: TlsFiles | None = None, *,
                 hubs: dict[str, int] | None = None,
                 sas_keys: SasKeys | None = None,
                 token_authority: TokenAuthority | None = None,
                 allowed_subjects: Iterable[str] | None = None,
                 max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE,
                 hostname: str = "localhost") -> None:
        self.host = host
        self._requested_port = port
        self.tls = tls
        self._ns = Namespace(hostname, dict(hubs if hubs is not None else {"scheduled-events": 4}),
                             Credentials(sas_keys, token_authority, allowed_subjects),
                             max_message_size)
        self._loop = Loop(self._ns.stats, tls.server_context() if tls else None)
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

    # ------------------------------------------------------------------------------ addresses

    @property
    def namespace(self) -> str:
        """``host:port`` (what ``fully_qualified_namespace`` takes with ``custom_endpoint_address``)."""
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
        parts = [f"Endpoint={self.endpoint}", f"SharedAccessKeyName={key_name}",
                 f"SharedAccessKey={key}"]
        if hub:
            parts.append(f"EntityPath={hub}")
        if not self.tls:
            parts.append("UseDevelopmentEmulator=true")
        return ";".join(parts)

    def sas_token(self, hub: str | None = None, key_name: str | None = None,
                  expiry: float | None = None) -> str:
        key_name, key = self._ns.credentials.key(key_name)
        return make_sas_token(f"{self.endpoint}/{hub or ''}", key_name, key, expiry)

    # ------------------------------------------------------------------------------ fault injection

    def reject_next(self, n: int = 1, condition: str = SERVER_BUSY,
                    description: str | None = None) -> None:
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

    def clear_faults(self) -> None:
        self._ns.faults.clear()

    # ------------------------------------------------------------------------------ queries

    @property
    def events(self) -> list[ReceivedEvent]:
        return self._ns.store.events

    def events_for(self, hub: str | None = None, partition_id: str | int | None = None
                   ) -> list[ReceivedEvent]:
        return self._ns.store.events_for(hub, partition_id)

    def by_property(self, name: str, value: Any = ...) -> list[ReceivedEvent]:
        """Events whose application property ``name`` exists (and equals ``value`` if given)."""
        return self._ns.store.by_property(name, value)

    def by_partition(self, hub: str | None = None) -> dict[str, list[ReceivedEvent]]:
        return self._ns.store.by_partition(hub)

    def wait_for(self, count: int, timeout: float = 10.0, hub: str | None = None
                 ) -> list[ReceivedEvent]:
        """Wait until at least ``count`` events (of ``hub``) are stored; return them all.
        Raises TimeoutError saying how many arrived."""
        return self._ns.store.wait_for(count, timeout, hub)

    def clear(self) -> None:
        self._ns.store.clear()
