"""Background reads of the engines' Prometheus /metrics for `least_queue` pools.

One task per scraped backend reads its /metrics every `metrics.interval_s` and stores the parsed
`routing.Load` on the backend; a request only looks at the latest one, never waits for a scrape.
A failed scrape stores a Load with the error, so /admin/state says why the pool fell back to
in-flight. The backend's key is sent only to its own origin.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

import aiohttp

from tokenrace.gateway.follow import PerBackend
from tokenrace.gateway.routing import Load, parse_load

if TYPE_CHECKING:
    from tokenrace.gateway.runtime import Backend

MAX_METRICS_BYTES = 8 * 1024 * 1024


class Scraper(PerBackend):
    """The scrape tasks, kept in step with the backends the current runtime wants scraped."""

    task_name = "scrape"

    def __init__(self) -> None:
        super().__init__()
        self._session: aiohttp.ClientSession | None = None

    async def close(self) -> None:
        await self.stop()
        if self._session is not None:
            await self._session.close()

    async def _forever(self, backend: Backend) -> None:
        while True:
            backend.load = await self.scrape(backend)
            await asyncio.sleep(backend.config.metrics.interval_s)

    async def scrape(self, backend: Backend) -> Load:
        """One reading of the backend's /metrics (a Load with `error` if it failed)."""
        if self._session is None:
            # trust_env: HTTPS_PROXY/NO_PROXY apply, as for any client of a hosted endpoint.
            self._session = aiohttp.ClientSession(trust_env=True, auto_decompress=True)
        url = backend.metrics_url()
        headers = {k: v for k, v in backend.headers.items() if k != "Content-Type"}
        if _origin(url) != _origin(backend.config.url):
            headers.pop("Authorization", None)  # the key is for its own host only
        timeout = aiohttp.ClientTimeout(total=max(1.0, backend.config.metrics.interval_s))
        try:
            async with self._session.get(url, headers=headers, timeout=timeout, allow_redirects=False) as resp:
                if resp.status != 200:
                    return Load(time.monotonic(), backend.in_flight, error=f"HTTP {resp.status}")
                body = await resp.content.read(MAX_METRICS_BYTES)
        except TimeoutError:
            return Load(time.monotonic(), backend.in_flight, error="timeout")
        except aiohttp.ClientError as exc:
            # The class name only: messages carry URLs, which may carry credentials.
            return Load(time.monotonic(), backend.in_flight, error=f"connection: {type(exc).__name__}")
        return parse_load(body.decode("utf-8", "replace"), time.monotonic(), backend.in_flight)


def _origin(url: str) -> str:
    scheme, _, rest = url.partition("://")
    return f"{scheme}://{rest.split('/', 1)[0].rsplit('@', 1)[-1]}".lower()
