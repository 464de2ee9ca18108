"""What every HTTP stand-in shares: a context manager around start/stop, and its port."""

from __future__ import annotations

from typing import Any, Self


class Served:
    """Mixin: the class defines ``start() -> Self``, ``stop()`` and sets ``_server`` (a
    ``socketserver`` server) while it runs."""

    _server: Any

    def start(self) -> Self:  # pragma: no cover - defined by the stand-in
        raise NotImplementedError

    def stop(self) -> None:
        """Shut the server down and close its socket (a stand-in with more to stop overrides)."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("the stand-in is not started")
        port: int = self._server.server_address[1]
        return port
