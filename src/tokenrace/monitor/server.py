"""The server's own Prometheus `/metrics`, scraped over HTTP and normalised across engines.

Parsing uses prometheus-client's text parser. Each engine's names map onto one set of fields, so a
timeseries line reads the same for vLLM, SGLang, llama.cpp and TGI:

| field | unit | vLLM | SGLang | llama.cpp | TGI |
|---|---|---|---|---|---|
| `running` | requests | `vllm:num_requests_running` | `sglang:num_running_reqs` | `llamacpp:requests_processing` | `tgi_batch_current_size` |
| `waiting` | requests | `vllm:num_requests_waiting` | `sglang:num_queue_reqs` | `llamacpp:requests_deferred` | `tgi_queue_size` |
| `kv_cache_usage` | fraction 0-1 | `vllm:kv_cache_usage_perc` (older: `gpu_cache_usage_perc`; a fraction despite the name) | `sglang:token_usage` | `llamacpp:kv_cache_usage_ratio` (older builds) | — |
| `prompt_tokens_per_s`, `generation_tokens_per_s` | tokens/s | `*_tokens_total` counters | same | `prompt_tokens_total`, `tokens_predicted_total` | — |
| `preemptions_total` | requests | `vllm:num_preemptions_total` | — | — | — |
| `ttft_mean_ms`, `tpot_mean_ms` | ms | `*:time_to_first_token_seconds`, `*:time_per_output_token_seconds` histograms (vLLM 0.11+: `vllm:request_time_per_output_token_seconds`) | same | — | — |

Gauges are summed over label sets (data-parallel engines report one set each), except
`kv_cache_usage`, the fullest cache. Rates and histogram means cover the time since the previous
scrape, so the first scrape has them None. A field an engine does not report is None.
"""

from __future__ import annotations

import contextlib
import ipaddress
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlsplit

import aiohttp
import psutil

from tokenrace.engines import WITH_METRICS, server_root
from tokenrace.model.monitor import Number, ServerSample
from tokenrace.monitor.gpu import SamplerUnavailable

MAX_BODY_BYTES = 16 * 2**20  # a real vLLM /metrics is ~100 KB; anything this big is not one


MAX_GAUGES = frozenset({"kv_cache_usage"})
SERVER_FIELDS = (
    "engine",
    "running",
    "waiting",
    "kv_cache_usage",
    "prompt_tokens_per_s",
    "generation_tokens_per_s",
    "preemptions_total",
    "ttft_mean_ms",
    "tpot_mean_ms",
    "scrape_ms",
)


@dataclass(slots=True)
class Scrape:
    """One parsed /metrics text: every sample name's values over its label sets."""

    at_s: float  # time.monotonic() when the answer arrived
    values: dict[str, list[float]]

    def total(self, name: str) -> float | None:
        v = self.values.get(name)
        return sum(v) if v else None


def parse_metrics(text: str, at_s: float) -> Scrape:
    """Raises ValueError when the text is not Prometheus exposition format."""
    from prometheus_client.parser import text_string_to_metric_families  # noqa: PLC0415 - import cost: the Prometheus parser only when /metrics was scraped

    values: dict[str, list[float]] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            values.setdefault(s.name, []).append(float(s.value))
    return Scrape(at_s, values)


def detect_engine(scrape: Scrape) -> str | None:
    for engine, names in WITH_METRICS.items():
        if any(n.startswith(names.prefix) for n in scrape.values):
            return engine
    return None


def normalize(engine: str, now: Scrape, before: Scrape | None) -> ServerSample:
    """The timeseries `server` object (without `scrape_ms`) from this scrape and the one before."""
    names = WITH_METRICS[engine]
    gauges = {name: _gauge(now, candidates, name in MAX_GAUGES) for name, candidates in names.gauges.items()}
    dt = now.at_s - before.at_s if before is not None else 0.0

    def per_s(stem: str) -> float | None:
        counter = names.counters.get(stem)
        return _rate(now, before, counter, dt) if counter else None

    preempt = names.counters.get("preemptions")
    return ServerSample(
        engine=engine,
        running=gauges.get("running"),
        waiting=gauges.get("waiting"),
        kv_cache_usage=gauges.get("kv_cache_usage"),
        prompt_tokens_per_s=per_s("prompt_tokens"),
        generation_tokens_per_s=per_s("generation_tokens"),
        preemptions_total=_count(now.total(preempt)) if preempt else None,
        ttft_mean_ms=_hist_mean_ms(now, before, names.histograms.get("ttft_s", ())),
        tpot_mean_ms=_hist_mean_ms(now, before, names.histograms.get("tpot_s", ())),
    )


def _gauge(s: Scrape, candidates: tuple[str, ...], use_max: bool) -> Number | None:
    for name in candidates:
        v = s.values.get(name)
        if v:
            return round(max(v), 6) if use_max else _count(sum(v))
    return None


def _count(v: float | None) -> Number | None:
    if v is None:
        return None
    return int(v) if float(v).is_integer() else round(v, 6)


def _rate(now: Scrape, before: Scrape | None, name: str, dt: float) -> float | None:
    if before is None or dt <= 0:
        return None
    a, b = before.total(name), now.total(name)
    if a is None or b is None or b < a:  # b < a: the server restarted and its counters reset
        return None
    return round((b - a) / dt, 3)


def _hist_mean_ms(now: Scrape, before: Scrape | None, names: tuple[str, ...]) -> float | None:
    """Mean of the observations made between the two scrapes (sum and count deltas), of the first
    of `names` that had any."""
    if before is None:
        return None
    return first_found(names, lambda name: _one_hist_mean_ms(now, before, name))


def first_found(names: tuple[str, ...], mean: Callable[[str], float | None]) -> float | None:
    """`mean` of the first of `names` (an engine's newest name first) that has a value."""
    return next((m for m in map(mean, names) if m is not None), None)


def _one_hist_mean_ms(now: Scrape, before: Scrape, name: str) -> float | None:
    s1, c1 = now.total(f"{name}_sum"), now.total(f"{name}_count")
    s0, c0 = before.total(f"{name}_sum"), before.total(f"{name}_count")
    if None in (s1, c1, s0, c0):
        return None
    assert s1 is not None and c1 is not None and s0 is not None and c0 is not None
    if c1 - c0 <= 0:
        return None
    return round((s1 - s0) / (c1 - c0) * 1000.0, 4)


class ScrapeFailed(Exception):
    """A scrape that may work next time (timeout, refused connection, HTTP 5xx)."""


class MetricsScraper:
    """GETs `url` and turns the answer into the `server` part of a sample (`ServerSample`). Fetch on the event loop; parse
    with `parse()` in a worker thread, since a large /metrics text takes milliseconds to parse."""

    name = "server"

    def __init__(self, url: str, timeout_s: float = 2.0, headers: dict[str, str] | None = None) -> None:
        self.url = url
        self.timeout_s = timeout_s
        self.headers = headers or {}
        self.engine: str | None = None
        self.first_text: str | None = None  # kept for run-level histogram deltas (server_clock)
        self.last_text: str | None = None
        self._before: Scrape | None = None
        self._session: aiohttp.ClientSession | None = None

    async def open(self) -> None:
        # Its own small pool: scrapes must not take connections from the benchmark's pool.
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=1), timeout=aiohttp.ClientTimeout(total=self.timeout_s)
        )

    async def fetch(self) -> tuple[str, float, float]:
        """(text, arrival time.monotonic(), request duration ms)."""
        assert self._session is not None, "open() first"
        t0 = time.monotonic()
        try:
            async with self._session.get(self.url, headers=self.headers) as resp:
                if resp.status >= 500:
                    raise ScrapeFailed(f"HTTP {resp.status} from {self.url}")
                if resp.status != 200:
                    raise SamplerUnavailable(f"no Prometheus /metrics at {self.url} (HTTP {resp.status})")
                body = await _read_capped(resp, self.url)
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            raise ScrapeFailed(f"{type(exc).__name__} from {self.url}: {exc}".rstrip(": ")) from None
        t1 = time.monotonic()
        return body.decode("utf-8", errors="replace"), t1, round((t1 - t0) * 1000.0, 3)

    def parse(self, text: str, at_s: float, scrape_ms: float) -> ServerSample:
        try:
            now = parse_metrics(text, at_s)
        except ValueError as exc:
            raise SamplerUnavailable(f"{self.url} is not Prometheus text ({exc})") from None
        if self.engine is None:
            self.engine = detect_engine(now)
            if self.engine is None:
                raise SamplerUnavailable(f"{self.url} has no vLLM, SGLang, llama.cpp or TGI metrics")
            self.first_text = text
        self.last_text = text
        out = normalize(self.engine, now, self._before)
        out.scrape_ms = scrape_ms
        self._before = now
        return out

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


async def _read_capped(resp: aiohttp.ClientResponse, url: str) -> bytes:
    """The whole body (`content.read(n)` may return after the first chunk), refusing a huge one."""
    chunks: list[bytes] = []
    size = 0
    async for chunk in resp.content.iter_chunked(1 << 16):
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            raise SamplerUnavailable(f"{url} answered more than {MAX_BODY_BYTES} bytes: not a /metrics page")
        chunks.append(chunk)
    return b"".join(chunks)


def metrics_url_for(base_url: str) -> str:
    """`http://host:8000/v1` -> `http://host:8000/metrics`: where vLLM, SGLang, llama.cpp and TGI
    serve it (SGLang needs --enable-metrics, llama.cpp --metrics)."""
    return server_root(base_url).rstrip("/") + "/metrics"


def is_local_url(url: str) -> bool:
    """True when `url`'s host is this machine (loopback, or one of its own addresses): only then
    do this machine's GPU figures describe the server."""

    host = (urlsplit(url).hostname or "").lower()
    if host in ("localhost", "") or host.endswith(".localhost"):
        return True
    try:
        if ipaddress.ip_address(host).is_loopback or ipaddress.ip_address(host).is_unspecified:
            return True
    except ValueError:
        # A name other than this host's own: resolving it could block, and remote is the common case.
        return host == socket.gethostname().lower()
    own = {a.address.split("%")[0] for addrs in psutil.net_if_addrs().values() for a in addrs}
    return host in own


def first_histogram_mean_delta(before: str, after: str, names: tuple[str, ...]) -> float | None:
    """`histogram_mean_delta` of the first of `names` (an engine's newest name first) that has one."""
    return first_found(names, lambda name: histogram_mean_delta(before, after, name))


def histogram_mean_delta(before: str, after: str, name: str) -> float | None:
    """Mean of a Prometheus histogram over the interval between two scrapes (sum/count deltas,
    summed over label sets), in the histogram's unit."""
    b_sum, b_count = _hist_totals(before, name)
    a_sum, a_count = _hist_totals(after, name)
    if a_count - b_count <= 0:
        return None
    return (a_sum - b_sum) / (a_count - b_count)


def _hist_totals(text: str, name: str) -> tuple[float, float]:
    from prometheus_client.parser import text_string_to_metric_families  # noqa: PLC0415 - import cost: the Prometheus parser only when /metrics was scraped

    total, count = 0.0, 0.0
    for fam in text_string_to_metric_families(text):
        if fam.name != name:
            continue
        for sample in fam.samples:
            if sample.name == f"{name}_sum":
                total += sample.value
            elif sample.name == f"{name}_count":
                count += sample.value
    return total, count


def labeled_samples(text: str, names: frozenset[str]) -> list[tuple[str, dict[str, str], float]]:
    """(sample name, labels, value) of every sample whose name is in `names`, with prometheus-client's
    parser. Sample names are matched exactly, so a counter's `_created` series and a per-position
    family never pass for its `_total`. Raises ValueError when the text is not Prometheus text."""
    from prometheus_client.parser import text_string_to_metric_families  # noqa: PLC0415 - import cost: the Prometheus parser only when /metrics was scraped

    return [
        (s.name, dict(s.labels), float(s.value))
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
        if s.name in names
    ]


def local_server_pids(url: str) -> set[int] | None:
    """The processes behind a server on this machine: the one listening on `url`'s port and its
    children (vLLM's engine core, a launcher's server). None where it cannot be told: a remote host,
    another container's process, or a system that hides other users' sockets."""
    if not is_local_url(url):
        return None
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        listening = {
            c.pid
            for c in psutil.net_connections(kind="tcp")
            if c.pid is not None and c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port
        }
    except (psutil.Error, OSError):
        return None
    pids = set(listening)
    for pid in listening:
        with contextlib.suppress(psutil.Error):
            pids.update(child.pid for child in psutil.Process(pid).children(recursive=True))
    return pids or None
