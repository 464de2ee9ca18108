"""The collector's synchronous credential and checkpoint store behind the interfaces of the
asynchronous Event Hubs client (``azure.eventhub.aio``), each call on a worker thread.

The asynchronous client serves every partition at once (a task each) where the synchronous one
serves them in turn on one thread; its own credential and checkpoint store would need
``aiohttp`` (``azure.identity.aio``, ``azure-eventhub-checkpointstoreblob-aio``), which the
collector does not install. Ownership claims, checkpoints and tokens run on a few daemon
threads of the bridge's own (``Workers``), never on asyncio's default executor, which the loop
joins when it ends: a call stuck in Blob Storage's retries (the store stopped) would hold up the
collector's stop for minutes.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
from collections.abc import Callable, Iterable
from typing import Any

from azure.core.credentials import AccessToken
from azure.eventhub.aio import CheckpointStore
from azure.eventhub.extensions.checkpointstoreblob import BlobCheckpointStore

WORKERS = 8  # blocking calls at once: checkpoints of that many partitions, claims, tokens

Call = tuple[asyncio.AbstractEventLoop, "asyncio.Future[Any]", Callable[[], Any]]


class Workers:
    """Daemon threads that run blocking calls for coroutines (``call``)."""

    def __init__(self, count: int = WORKERS) -> None:
        self._calls: queue.SimpleQueue[Call] = queue.SimpleQueue()
        for n in range(count):
            name = f"collector-blob-{n}"
            threading.Thread(target=self._work, name=name, daemon=True).start()

    async def call(self, fn: Callable[..., Any], *args: Any, **kw: Any) -> Any:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        self._calls.put((loop, future, lambda: fn(*args, **kw)))
        return await future

    def _work(self) -> None:
        while True:
            loop, future, fn = self._calls.get()
            if future.cancelled():
                continue
            try:
                result = fn()
            except BaseException as exc:  # handed to the coroutine that asked
                settle = _fail(future, exc)
            else:
                settle = _succeed(future, result)
            with contextlib.suppress(RuntimeError):  # the loop has ended: nobody waits
                loop.call_soon_threadsafe(settle)


def _succeed(future: asyncio.Future[Any], result: Any) -> Callable[[], None]:
    return lambda: None if future.done() else future.set_result(result)


def _fail(future: asyncio.Future[Any], exc: BaseException) -> Callable[[], None]:
    return lambda: None if future.done() else future.set_exception(exc)


class ThreadedCheckpointStore(CheckpointStore):
    """``BlobCheckpointStore`` (synchronous) as ``azure.eventhub.aio.CheckpointStore``."""

    def __init__(self, store: BlobCheckpointStore, workers: Workers) -> None:
        self.store, self.workers = store, workers

    async def list_ownership(
        self, fully_qualified_namespace: str, eventhub_name: str, consumer_group: str, **kw: Any
    ) -> Iterable[dict[str, Any]]:
        return await self.workers.call(  # type: ignore[no-any-return]
            self.store.list_ownership,
            fully_qualified_namespace,
            eventhub_name,
            consumer_group,
            **kw,
        )

    async def claim_ownership(
        self, ownership_list: Iterable[dict[str, Any]], **kw: Any
    ) -> Iterable[dict[str, Any]]:
        return await self.workers.call(  # type: ignore[no-any-return]
            self.store.claim_ownership, list(ownership_list), **kw
        )

    async def update_checkpoint(self, checkpoint: dict[str, Any], **kw: Any) -> None:
        await self.workers.call(self.store.update_checkpoint, checkpoint, **kw)

    async def list_checkpoints(
        self, fully_qualified_namespace: str, eventhub_name: str, consumer_group: str, **kw: Any
    ) -> Iterable[dict[str, Any]]:
        return await self.workers.call(  # type: ignore[no-any-return]
            self.store.list_checkpoints,
            fully_qualified_namespace,
            eventhub_name,
            consumer_group,
            **kw,
        )


class ThreadedCredential:
    """A synchronous ``TokenCredential`` (azure-identity's) as an ``AsyncTokenCredential``."""

    def __init__(self, credential: Any, workers: Workers) -> None:
        self.credential, self.workers = credential, workers

    async def get_token(self, *scopes: str, **kw: Any) -> AccessToken:
        return await self.workers.call(self.credential.get_token, *scopes, **kw)  # type: ignore[no-any-return]

    async def close(self) -> None:
        """The credential is the collector's (Resource Graph shares it): it closes it."""

    async def __aenter__(self) -> ThreadedCredential:
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None
