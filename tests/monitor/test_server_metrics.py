"""The /metrics scraper, for real over HTTP: recorded vLLM, SGLang and llama.cpp texts served by the
fake server, including texts that change between scrapes (rates, histogram means)."""

from __future__ import annotations

import asyncio
import re
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import wait_until_async

from tokenrace.fakes.fake_server import FakeServerThread
from tokenrace.monitor import MetricsScraper, MonitorSession, SamplerUnavailable, metrics_url_for
from tokenrace.monitor.server import SERVER_FIELDS, detect_engine, normalize, parse_metrics

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "metrics"


def bump(text: str, name: str, delta: float) -> str:
    """Add `delta` to every sample line of `name` (any labels)."""
    pattern = re.compile(rf"^({re.escape(name)}(?:\{{[^}}]*\}})?) (\S+)$", re.MULTILINE)
    return pattern.sub(lambda m: f"{m.group(1)} {float(m.group(2)) + delta!r}", text)


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[FakeServerThread, Path]]:
    """The fake server serving a copy of a fixture that the test may rewrite between scrapes."""
    path = tmp_path / "metrics.txt"
    with FakeServerThread({"metrics_text_path": str(path)}) as srv:
        yield srv, path


async def scrape(url: str, times: int = 1, between: object = None) -> list[dict[str, Any]]:
    s = MetricsScraper(url)
    await s.open()
    out = []
    try:
        for i in range(times):
            if i and callable(between):
                between(i)
            text, at, ms = await s.fetch()
            out.append(s.parse(text, at, ms).model_dump())
    finally:
        await s.close()
    return out


@pytest.mark.parametrize(
    ("fixture", "engine", "running", "waiting", "kv"),
    [
        ("vllm.txt", "vllm", 12, 3, 0.41276),
        ("sglang.txt", "sglang", 24, 5, 0.31),
        ("llamacpp.txt", "llamacpp", 2, 1, 0.1875),
    ],
)
def test_each_engine_over_http(
    served: tuple[FakeServerThread, Path], fixture: str, engine: str, running: int, waiting: int, kv: float
) -> None:
    srv, path = served
    path.write_bytes((FIXTURES / fixture).read_bytes())
    (first,) = asyncio.run(scrape(f"{srv.url}/metrics"))
    assert set(first) == set(SERVER_FIELDS)
    assert first["engine"] == engine
    assert first["running"] == running and isinstance(first["running"], int)
    assert first["waiting"] == waiting
    assert first["kv_cache_usage"] == pytest.approx(kv, abs=1e-5)
    # Rates and histogram means need a previous scrape: undefined on the first, never 0.
    assert first["generation_tokens_per_s"] is None and first["ttft_mean_ms"] is None
    assert first["scrape_ms"] > 0


def test_rates_and_histogram_means_between_two_scrapes(served: tuple[FakeServerThread, Path]) -> None:
    srv, path = served
    text = (FIXTURES / "vllm.txt").read_text()
    path.write_text(text)

    def traffic(_: int) -> None:
        t = bump(text, "vllm:time_to_first_token_seconds_sum", 2.5)
        t = bump(t, "vllm:time_to_first_token_seconds_count", 10)  # 10 requests, 250 ms mean
        t = bump(t, "vllm:time_per_output_token_seconds_sum", 0.2)
        t = bump(t, "vllm:time_per_output_token_seconds_count", 10)  # 20 ms mean
        t = bump(t, "vllm:generation_tokens_total", 1000)
        t = bump(t, "vllm:num_preemptions_total", 2)
        t = bump(t, "vllm:num_requests_waiting", 4)
        path.write_text(t)

    first, second = asyncio.run(scrape(f"{srv.url}/metrics", 2, traffic))
    assert second["ttft_mean_ms"] == pytest.approx(250.0)
    assert second["tpot_mean_ms"] == pytest.approx(20.0)
    assert second["generation_tokens_per_s"] > 0
    assert second["prompt_tokens_per_s"] == 0.0  # measured: no prompt tokens between the scrapes
    assert second["waiting"] == 7 and second["preemptions_total"] == 2 and first["preemptions_total"] == 0


def test_sglang_histograms_with_le_first(served: tuple[FakeServerThread, Path]) -> None:
    srv, path = served
    text = (FIXTURES / "sglang.txt").read_text()
    path.write_text(text)

    def traffic(_: int) -> None:
        t = bump(text, "sglang:time_to_first_token_seconds_sum", 1.2)
        path.write_text(bump(t, "sglang:time_to_first_token_seconds_count", 4))

    _, second = asyncio.run(scrape(f"{srv.url}/metrics", 2, traffic))
    assert second["ttft_mean_ms"] == pytest.approx(300.0)
    assert second["tpot_mean_ms"] is None  # no request finished between the scrapes


def test_a_large_page_is_read_whole(served: tuple[FakeServerThread, Path]) -> None:
    """A real vLLM with many models/LoRAs serves hundreds of KB; the tail must not be cut off."""
    srv, path = served
    filler = "".join(f'python_gc_objects_collected_total{{generation="{i}"}} {i}.0\n' for i in range(12000))
    text = "# TYPE python_gc_objects_collected_total counter\n" + filler + (FIXTURES / "vllm.txt").read_text()
    path.write_text(text)
    assert len(text) > 500_000
    (first,) = asyncio.run(scrape(f"{srv.url}/metrics"))
    assert first["engine"] == "vllm" and first["waiting"] == 3  # vLLM's lines come last


def test_a_server_without_metrics_is_unavailable(fake: FakeServerThread) -> None:
    with pytest.raises(SamplerUnavailable, match="HTTP 404"):
        asyncio.run(scrape(f"{fake.url}/metrics"))


def test_a_page_that_is_not_prometheus_text_is_unavailable(served: tuple[FakeServerThread, Path]) -> None:
    srv, path = served
    path.write_text("<html><body>hello</body></html>\n")
    with pytest.raises(SamplerUnavailable, match="not Prometheus text"):
        asyncio.run(scrape(f"{srv.url}/metrics"))


def test_prometheus_text_of_an_unknown_server_is_unavailable(served: tuple[FakeServerThread, Path]) -> None:
    srv, path = served
    path.write_text("# TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total 1.5\n")
    with pytest.raises(SamplerUnavailable, match="no vLLM, SGLang"):
        asyncio.run(scrape(f"{srv.url}/metrics"))


def test_data_parallel_gauges_add_up_and_the_fullest_cache_counts() -> None:
    text = (FIXTURES / "vllm.txt").read_text()
    extra = "\n".join(
        line.replace('engine="0"', 'engine="1"')
        for line in text.splitlines()
        if line.startswith(("vllm:num_requests_running{", "vllm:kv_cache_usage_perc{"))
    ).replace("0.4127604166666667", "0.9")
    s = parse_metrics(text + extra + "\n", 0.0)
    out = normalize(detect_engine(s) or "", s, None).model_dump()
    assert out["running"] == 24 and out["kv_cache_usage"] == 0.9


def test_monitor_session_scrapes_and_sums_up_the_server(served: tuple[FakeServerThread, Path], tmp_path: Path) -> None:
    srv, path = served
    text = (FIXTURES / "vllm.txt").read_text()
    path.write_text(text)

    async def go() -> tuple[dict[str, Any], tuple[str | None, str | None, str | None]]:
        m = MonitorSession(tmp_path / "run", 0.1, metrics_url_for(srv.base_url), gpu=False)
        await m.start()
        await wait_until_async(lambda: m.samples >= 3, what="3 scrapes")
        t = bump(text, "vllm:time_to_first_token_seconds_sum", 1.0)
        t = bump(t, "vllm:time_to_first_token_seconds_count", 5)
        path.write_text(bump(t, "vllm:num_requests_waiting", 9))
        before = m.samples  # the next sample may have begun before the write: the one after it did not
        await wait_until_async(lambda: m.samples >= before + 2, what="2 scrapes after the change")
        return (await m.stop()).model_dump(), m.server_metrics_texts()

    r, (engine, first, last) = asyncio.run(go())
    assert r["samplers"]["server"] == {"status": "ok", "reason": None, "errors": 0}
    srv_sum = r["server"]
    assert srv_sum["engine"] == "vllm" and srv_sum["waiting_max"] == 12 and srv_sum["running_max"] == 12
    assert srv_sum["ttft_mean_ms"] == pytest.approx(200.0)  # over the whole span, first to last scrape
    assert srv_sum["preemptions"] == 0
    assert engine == "vllm" and first != last


def test_session_disables_a_404_scraper_at_once(fake: FakeServerThread, tmp_path: Path) -> None:
    async def go() -> dict[str, Any]:
        m = MonitorSession(tmp_path, 0.05, f"{fake.url}/metrics", gpu=False)
        await m.start()
        await wait_until_async(lambda: m.samples >= 2, what="2 samples")  # the scraper gives up on the first
        return (await m.stop()).model_dump()

    r = asyncio.run(go())
    s = r["samplers"]["server"]
    assert s["status"] == "unavailable" and s["errors"] == 1 and "HTTP 404" in s["reason"]
    assert r["server"] is None and r["system"] is not None


def test_session_gives_up_on_an_unreachable_server_after_three_tries(tmp_path: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # bound, not listening: connections are refused

        async def go() -> dict[str, Any]:
            m = MonitorSession(tmp_path, 0.05, f"http://127.0.0.1:{port}/metrics", gpu=False)
            await m.start()
            await wait_until_async(lambda: m.samplers["server"].status != "ok", what="the scraper to give up")
            await wait_until_async(lambda: m.samples >= 5, what="5 samples")  # and not try again
            return (await m.stop()).model_dump()

        r = asyncio.run(go())
    s = r["samplers"]["server"]
    assert s["status"] == "unavailable" and s["errors"] == 3, s
    assert r["errors"] == 3


def test_metrics_url_for_a_base_url() -> None:
    assert metrics_url_for("http://127.0.0.1:8000/v1") == "http://127.0.0.1:8000/metrics"
    assert metrics_url_for("http://h:30000") == "http://h:30000/metrics"
