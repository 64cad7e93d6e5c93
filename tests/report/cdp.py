"""Load a page in headless Chromium through the DevTools protocol: console errors, exceptions,
network requests, chart counts, and a full-page screenshot."""

from __future__ import annotations

import asyncio
import base64
import itertools
import re
import shutil
import subprocess
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
from tests.conftest import require

FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
    "--remote-debugging-port=0",
)


def require_chromium() -> str:
    return require(
        "chromium", shutil.which("chromium") or shutil.which("chromium-browser"), "apt-get install -y chromium"
    )


@dataclass
class PageCheck:
    console_errors: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)
    charts: int = 0
    rendered: int = 0  # charts with an SVG drawn inside
    traces: int = 0
    title: str = ""
    height: int = 0
    cards: list[list[str]] = field(default_factory=list)  # each key-number card's label, value and detail


class Devtools:
    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.ws = ws
        self.ids = itertools.count(1)
        self.pending: dict[int, asyncio.Future[Any]] = {}
        self.events: list[dict[str, Any]] = []
        self.loaded = asyncio.Event()
        self.reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        async for msg in self.ws:
            if msg.type != aiohttp.WSMsgType.TEXT:
                continue
            data = msg.json()
            if "id" in data and data["id"] in self.pending:
                self.pending.pop(data["id"]).set_result(data)
            else:
                self.events.append(data)
                if data.get("method") == "Page.loadEventFired":
                    self.loaded.set()

    async def call(self, method: str, **params: Any) -> dict[str, Any]:
        i = next(self.ids)
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.pending[i] = fut
        await self.ws.send_json({"id": i, "method": method, "params": params})
        reply = await asyncio.wait_for(fut, 60)
        if "error" in reply:
            raise RuntimeError(f"{method}: {reply['error']}")
        result: dict[str, Any] = reply.get("result", {})
        return result

    async def evaluate(self, expr: str) -> Any:
        r = await self.call("Runtime.evaluate", expression=expr, returnByValue=True)
        return r["result"].get("value")


def _devtools_port(proc: subprocess.Popen[bytes], timeout_s: float = 30) -> int:
    assert proc.stderr is not None
    lines: list[str] = []

    found: list[int] = []

    def read() -> None:
        assert proc.stderr is not None
        for raw in proc.stderr:
            line = raw.decode(errors="replace")
            lines.append(line)
            m = re.search(r"DevTools listening on ws://[^:]+:(\d+)/", line)
            if m:
                found.append(int(m.group(1)))
                return

    t = threading.Thread(target=read, daemon=True)
    t.start()
    t.join(timeout_s)
    if not found:
        raise RuntimeError("chromium did not start its DevTools endpoint:\n" + "".join(lines[-20:]))
    return found[0]


async def _inspect(port: int, url: str, screenshot: Path, width: int, max_height: int | None) -> PageCheck:
    async with aiohttp.ClientSession() as http:
        page = await _page_target(http, port)
        async with http.ws_connect(page["webSocketDebuggerUrl"], max_msg_size=0) as ws:
            dt = Devtools(ws)
            for domain in ("Runtime", "Log", "Page", "Network"):
                await dt.call(f"{domain}.enable")
            await dt.call(
                "Emulation.setDeviceMetricsOverride", width=width, height=900, deviceScaleFactor=1, mobile=False
            )
            await dt.call("Page.navigate", url=url)
            await asyncio.wait_for(dt.loaded.wait(), 60)
            check = PageCheck()
            await _settle(dt, check)
            check.traces = await dt.evaluate(
                "Array.from(document.querySelectorAll('.js-plotly-plot')).reduce((n, d) => n + (d.data || []).length, 0)"
            )
            check.title = await dt.evaluate("document.title")
            check.cards = await dt.evaluate(CARDS)
            check.height = int(await dt.evaluate("document.documentElement.scrollHeight"))
            shot = await dt.call(
                "Page.captureScreenshot",
                format="png",
                captureBeyondViewport=True,
                clip={
                    "x": 0,
                    "y": 0,
                    "width": width,
                    "height": min(check.height, max_height or check.height),
                    "scale": 1,
                },
            )
            screenshot.parent.mkdir(parents=True, exist_ok=True)
            screenshot.write_bytes(base64.b64decode(shot["data"]))
            _collect(dt.events, check)
            dt.reader.cancel()
            return check


# textContent, not innerText: the label's CSS upper-cases what a reader sees, not the text itself.
CARDS = "Array.from(document.querySelectorAll('.card')).map(c => Array.from(c.children).map(e => e.textContent))"
RENDERED = (
    "Array.from(document.querySelectorAll('.js-plotly-plot'))"
    ".filter(d => d.querySelector('svg.main-svg') && d._fullData && d._fullData.length).length"
)


async def _settle(dt: Devtools, check: PageCheck, timeout_s: float = 60) -> None:
    """Wait until every chart has drawn and the page height stops changing (plotly lays out over frames)."""
    last = None
    deadline = asyncio.get_running_loop().time() + timeout_s
    while asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.5)
        check.charts = await dt.evaluate("document.querySelectorAll('.js-plotly-plot').length")
        check.rendered = await dt.evaluate(RENDERED)
        now = (check.charts, check.rendered, await dt.evaluate("document.documentElement.scrollHeight"))
        if check.charts and check.rendered == check.charts and now == last:
            return
        last = now


async def _page_target(http: aiohttp.ClientSession, port: int, timeout_s: float = 30) -> dict[str, Any]:
    """The first page target; on a busy machine it may appear a moment after DevTools starts listening."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while True:
        async with http.get(f"http://127.0.0.1:{port}/json/list") as r:
            pages = [t for t in await r.json() if t.get("type") == "page" and t.get("webSocketDebuggerUrl")]
        if pages:
            page: dict[str, Any] = pages[0]
            return page
        if asyncio.get_running_loop().time() > deadline:
            raise RuntimeError("chromium opened no page target")
        await asyncio.sleep(0.2)


def _collect(events: list[dict[str, Any]], check: PageCheck) -> None:
    for e in events:
        method, p = e.get("method"), e.get("params", {})
        if method == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
            check.console_errors.append(
                " ".join(str(a.get("value", a.get("description", ""))) for a in p.get("args", []))
            )
        elif method == "Runtime.exceptionThrown":
            d = p.get("exceptionDetails", {})
            check.console_errors.append(d.get("exception", {}).get("description") or d.get("text", "exception"))
        elif method == "Log.entryAdded" and p.get("entry", {}).get("level") == "error":
            check.console_errors.append(p["entry"].get("text", ""))
        elif method == "Network.requestWillBeSent":
            check.requests.append(p.get("request", {}).get("url", ""))


def load_page(html_file: Path, screenshot: Path, width: int = 1400, max_height: int | None = None) -> PageCheck:
    binary = require_chromium()
    # Chromium's helper processes may still be writing the profile as it exits: tolerate that on cleanup.
    with tempfile.TemporaryDirectory(prefix="chromium-", ignore_cleanup_errors=True) as profile:
        proc = subprocess.Popen(
            [binary, *FLAGS, f"--user-data-dir={profile}", "about:blank"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        try:
            port = _devtools_port(proc)
            return asyncio.run(_inspect(port, html_file.resolve().as_uri(), screenshot, width, max_height))
        finally:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
