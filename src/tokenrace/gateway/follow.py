"""One background task per backend, kept in step with the backends the current runtime follows:
the /metrics scrapes (`scrape.Scraper`) and the KV-event subscriptions (`kvevents.KVEvents`)."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tokenrace.gateway.runtime import Backend


class PerBackend:
    """A task per followed backend running `_forever(backend)`; `follow` after every reload."""

    task_name = "follow"  # the tasks' names: "<task_name>-<backend>"

    def __init__(self) -> None:
        self._tasks: dict[Backend, asyncio.Task[None]] = {}

    def follow(self, backends: list[Backend]) -> None:
        """Follow exactly these backends from now on (start new tasks, stop dropped ones)."""
        wanted = set(backends)
        for backend in [b for b in self._tasks if b not in wanted]:
            self._tasks.pop(backend).cancel()
        loop = asyncio.get_running_loop()
        for backend in wanted - set(self._tasks):
            self._tasks[backend] = loop.create_task(self._forever(backend), name=f"{self.task_name}-{backend.name}")

    def following(self) -> list[str]:
        """The names of the backends followed."""
        return sorted(b.name for b in self._tasks)

    async def stop(self) -> None:
        """Cancel every task and wait for them to end."""
        tasks = list(self._tasks.values())
        self._tasks.clear()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _forever(self, backend: Backend) -> None:
        raise NotImplementedError
