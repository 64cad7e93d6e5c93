"""Pool policies end to end: least_queue reads real /metrics in the background, prefix_affinity
keeps conversations on the instance whose prefix cache holds them (fake servers on loopback)."""

from __future__ import annotations

import asyncio
import json
import random
import subprocess
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, cast

import aiohttp
import pytest
from aiohttp import web
from tests.conftest import wait_until

from tokenrace.fakes.fake_server import FakeServerThread
from tokenrace.gateway.config import BackendConfig, ConfigError, Secret, parse_config
from tokenrace.gateway.routing import HashRing, hash64
from tokenrace.gateway.runtime import Backend
from tokenrace.gateway.scrape import Scraper

from .helpers import CLIENT_KEY, ENV, ROOT, GatewayThread, config_text, http
from .test_proxy import metric, metric_lines, post, state

FAST = {"ttft_ms": 1, "itl_ms": 0, "output_tokens": 4, "models": ["m"]}


def waiting(path: Path, n: int, kv: float = 0.1) -> None:
    path.write_text(
        f'# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{{model_name="m"}} {n}\n'
        f'# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc{{model_name="m"}} {kv}\n'
    )


def until(check: Callable[[], bool], timeout_s: float = 10.0) -> None:
    wait_until(check, timeout_s)


def served_by(gw: GatewayThread, n: int, **kw: Any) -> list[str]:
    out = []
    for _ in range(n):
        status, headers, raw = post(gw, {"model": "m", "messages": [{"role": "user", "content": "hi"}]}, **kw)
        assert status == 200, raw
        out.append(headers["x-tokenrace-backend"])
    return out


def test_least_queue_follows_the_engines_queues_and_falls_back_visibly(
    tmp_path: Path, gateway: Callable[..., GatewayThread]
) -> None:
    ma, mb = tmp_path / "a.prom", tmp_path / "b.prom"
    waiting(ma, 6)
    waiting(mb, 0)
    with (
        FakeServerThread({**FAST, "metrics_text_path": str(ma)}) as a,
        FakeServerThread({**FAST, "metrics_text_path": str(mb)}) as b,
    ):
        fast = {"metrics": {"interval_s": 0.1}}
        gw = gateway(
            {"a": {"url": a.base_url, **fast}, "b": {"url": b.base_url, **fast}},
            [{"model": "m", "backends": [{"backend": ["a", "b"], "policy": "least_queue"}]}],
        )
        until(lambda: all(state(gw)["backends"][n]["load"].get("waiting") is not None for n in "ab"))
        assert set(served_by(gw, 8)) == {"b"}
        shown = state(gw)
        assert shown["backends"]["a"]["load"]["waiting"] == 6 and shown["backends"]["a"]["load"]["engine"] == "vllm"
        pool = shown["routes"]["m"]["targets"][0]["routing"]
        assert pool["policy"] == "least_queue" and pool["counts"]["b"] == {"least_queue": 8}

        waiting(ma, 0)
        waiting(mb, 9)
        until(lambda: state(gw)["backends"]["b"]["load"]["waiting"] == 9)
        assert set(served_by(gw, 4)) == {"a"}

        mb.write_text("process_cpu_seconds_total 1\n")  # b's engine stops showing its queue
        until(lambda: state(gw)["backends"]["b"]["load"]["waiting"] is None)
        served_by(gw, 2)
        last = state(gw)["routes"]["m"]["targets"][0]["routing"]["last"]
        assert last["reason"] == "in_flight_fallback" and last["detail"] == "b: no queue gauge in /metrics"


@pytest.fixture(scope="module")
def cached_pool() -> Iterator[list[FakeServerThread]]:
    config = {**FAST, "prefix_cache": True, "cache_block_size": 4}
    with FakeServerThread(config) as a, FakeServerThread(config) as b, FakeServerThread(config) as c:
        yield [a, b, c]


def conversation_hit_rate(gw: GatewayThread, pool: list[FakeServerThread], session_header: bool) -> float:
    """Six conversations of five turns, interleaved; cached / prompt tokens over all their requests."""
    for fake in pool:
        fake.reset()
    history: dict[int, list[dict[str, str]]] = {s: [{"role": "system", "content": "Answer briefly."}] for s in range(6)}
    cached = prompt = 0
    for turn in range(5):
        for s, messages in history.items():
            messages.append({"role": "user", "content": f"session {s} turn {turn} " + "detail " * 12})
            headers = {"X-Session-ID": f"conv-{s}"} if session_header else None
            status, _, raw = post(gw, {"model": "m", "messages": messages, "stream": False}, headers=headers)
            assert status == 200, raw
            body = json.loads(raw)
            usage = body["usage"]
            prompt += usage["prompt_tokens"]
            cached += usage["prompt_tokens_details"]["cached_tokens"]
            messages.append({"role": "assistant", "content": body["choices"][0]["message"]["content"]})
    return cached / prompt


@pytest.mark.slow
@pytest.mark.parametrize("session_header", [True, False], ids=["session-header", "prompt-prefix"])
def test_prefix_affinity_raises_the_cache_hit_rate_of_a_pool(
    cached_pool: list[FakeServerThread], gateway: Callable[..., GatewayThread], session_header: bool
) -> None:
    backends = {n: {"url": f.base_url} for n, f in zip("abc", cached_pool, strict=True)}
    rates = {}
    for policy in ("least_in_flight", "prefix_affinity"):
        gw = gateway(backends, [{"model": "m", "backends": [{"backend": ["a", "b", "c"], "policy": policy}]}])
        rates[policy] = conversation_hit_rate(gw, cached_pool, session_header)
        gw.stop()
    # With one instance per conversation each turn finds all of the previous turn's prompt cached;
    # spread over three, about one turn in three does.
    assert rates["prefix_affinity"] > 0.5, rates
    assert rates["prefix_affinity"] > rates["least_in_flight"] + 0.2, rates


def test_affinity_state_shows_the_ring_and_the_decisions(
    cached_pool: list[FakeServerThread], gateway: Callable[..., GatewayThread]
) -> None:
    backends = {n: {"url": f.base_url} for n, f in zip("abc", cached_pool, strict=True)}
    target = {"backend": ["a", "b", "c"], "policy": "prefix_affinity", "affinity": {"load_factor": 1.5}}
    gw = gateway(backends, [{"model": "m", "backends": [target]}])
    homes = {s: set(served_by(gw, 3, headers={"X-Session-ID": s})) for s in ("alice", "bob", "carol")}
    assert all(len(h) == 1 for h in homes.values()), homes
    pool = state(gw)["routes"]["m"]["targets"][0]["routing"]
    assert pool["policy"] == "prefix_affinity" and pool["affinity"]["load_factor"] == 1.5
    assert sorted(pool["ring_share"]) == ["a", "b", "c"]
    assert sum(sum(c.values()) for c in pool["counts"].values()) == 9
    assert all(set(c) == {"home"} for c in pool["counts"].values())
    assert len(pool["last"]["key_hash"]) == 16 and 0 <= pool["last"]["ring_position"] < 1
    assert http("GET", gw.url + "/healthz", key=None)[0] == 200


SESSIONS, TURNS = 24, 4


async def sessions_in_flight(base_url: str, jitter: random.Random) -> dict[str, set[str]]:
    """SESSIONS conversations of TURNS turns, all started together, each turn after the last one's
    answer; returns the instances that answered each session (`x-tokenrace-backend`)."""
    served: dict[str, set[str]] = {}
    go = asyncio.Event()

    async def conversation(http: aiohttp.ClientSession, sid: str) -> None:
        messages = [{"role": "system", "content": "Answer briefly."}]
        await go.wait()
        for turn in range(TURNS):
            messages.append({"role": "user", "content": f"{sid} turn {turn}"})
            body = {"model": "m", "messages": messages, "stream": True}
            headers = {"Authorization": f"Bearer {CLIENT_KEY}", "X-Session-ID": sid}
            async with http.post(base_url + "/chat/completions", json=body, headers=headers) as resp:
                assert resp.status == 200, await resp.text()
                await resp.read()
                served.setdefault(sid, set()).add(resp.headers["x-tokenrace-backend"])
            messages.append({"role": "assistant", "content": "ok"})
            await asyncio.sleep(jitter.uniform(0, 0.01))  # the client reads and types: turns do not align

    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as http:
        order = list(range(SESSIONS))
        jitter.shuffle(order)  # independent users: which session starts first has nothing to do with its home
        runs = [asyncio.create_task(conversation(http, f"session-{i}")) for i in order]
        await asyncio.sleep(0.05)  # every conversation is waiting on `go`
        go.set()
        await asyncio.gather(*runs)
    return served


@pytest.mark.slow
def test_sessions_all_in_flight_stay_on_one_instance_each(gateway: Callable[..., GatewayThread]) -> None:
    """24 conversations x 4 turns at once on a pool of three with the default affinity settings:
    the hash places them unevenly (within the bound at full load), the pool's load rises from 0 at
    the start and falls at the end, and still no session is served by two instances."""
    timing = {"ttft_ms": 20, "itl_ms": 2, "output_tokens": 8, "jitter_ms": 5, "models": ["m"]}
    with FakeServerThread(timing) as a, FakeServerThread(timing) as b, FakeServerThread(timing) as c:
        fakes = {"a": a, "b": b, "c": c}
        target = {"backend": ["a", "b", "c"], "policy": "prefix_affinity"}
        gw = gateway({n: {"url": f.base_url} for n, f in fakes.items()}, [{"model": "m", "backends": [target]}])
        for seed in range(3):
            served = asyncio.run(sessions_in_flight(gw.base_url, random.Random(seed)))
            assert len(served) == SESSIONS
            moved = {sid: instances for sid, instances in served.items() if len(instances) > 1}
            shown = state(gw)
            routing = shown["routes"]["m"]["targets"][0]["routing"]
            assert not moved, (
                moved,
                routing["counts"],
                routing["last"]["detail"],
                metric_lines(gw, "tokenrace_gateway_upstream_attempts_total"),
            )
        # What each backend received: each session's X-Session-ID, all its turns, on one instance only.
        received = {n: f.log(wait_idle_s=5) for n, f in fakes.items()}
        assert sum(map(len, received.values())) == 3 * SESSIONS * TURNS
        seen_by: dict[str, set[str]] = {}
        for name, entries in received.items():
            for entry in entries:
                seen_by.setdefault(entry["session_id"], set()).add(name)
        assert seen_by == served and all(len(n) == 1 for n in seen_by.values()), seen_by
        assert Counter(e["session_id"] for r in received.values() for e in r) == dict.fromkeys(served, 3 * TURNS)
        pool = state(gw)["routes"]["m"]["targets"][0]["routing"]
        assert pool["moved"] == 0 and all(set(c) <= {"home"} for c in pool["counts"].values()), pool["counts"]
        assert metric(gw, "tokenrace_gateway_affinity_moves_total") == 0


def test_a_move_is_counted_in_the_state_and_the_metrics(gateway: Callable[..., GatewayThread]) -> None:
    """The session's home refuses connections: its request is retried on the next instance, which
    the state shows as `moved` (from the home, why) and /metrics counts."""
    home = next(HashRing(["a", "b", "c"]).walk(hash64("session\x00" + "alice")))
    with FakeServerThread(FAST) as a, FakeServerThread(FAST) as b, FakeServerThread(FAST) as c:
        fakes = {"a": a, "b": b, "c": c}
        backends = {n: {"url": f.base_url} for n, f in fakes.items()}
        gw = gateway(
            backends, [{"model": "m", "backends": [{"backend": ["a", "b", "c"], "policy": "prefix_affinity"}]}]
        )
        fakes[home].stop()
        status, headers, raw = post(
            gw, {"model": "m", "messages": [{"role": "user", "content": "hi"}]}, headers={"X-Session-ID": "alice"}
        )
        assert status == 200, raw
        to = headers["x-tokenrace-backend"]
        pool = state(gw)["routes"]["m"]["targets"][0]["routing"]
        assert to != home and pool["moved"] == 1 and pool["counts"][to] == {"moved": 1}
        assert pool["last"]["detail"] == f"from {home} (home_unavailable)"
        assert metric(gw, "tokenrace_gateway_affinity_moves_total", route="m", from_backend=home, to_backend=to) == 1


def test_policy_settings_are_checked() -> None:
    def check(target: dict[str, Any]) -> str:
        text = config_text(
            {"a": {"url": "http://a:1/v1"}, "b": {"url": "http://b:1/v1"}}, [{"model": "m", "backends": [target]}]
        )
        with pytest.raises(ConfigError) as err:
            parse_config(text, "g.yaml", ENV)
        return str(err.value)

    assert "must be one of" in check({"backend": ["a", "b"], "policy": "round_robin"})
    assert "only with policy: prefix_affinity" in check(
        {"backend": ["a", "b"], "policy": "least_queue", "affinity": {"prefix_chars": 64}}
    )
    assert "must be >= 1" in check(
        {"backend": ["a", "b"], "policy": "prefix_affinity", "affinity": {"load_factor": 0.5}}
    )


def test_the_scrape_sends_the_backends_key_to_its_own_origin_only() -> None:
    seen: list[str | None] = []

    async def metrics(request: web.Request) -> web.Response:
        seen.append(request.headers.get("Authorization"))
        return web.Response(text="sglang:num_queue_reqs 2\nsglang:token_usage 0.5\n")

    async def main() -> list[tuple[float | None, float | None, str | None]]:
        runners = []
        ports = []
        for _ in range(2):
            app = web.Application()
            app.router.add_get("/metrics", metrics)
            runner = web.AppRunner(app)
            await runner.setup()
            site = web.TCPSite(runner, "127.0.0.1", 0)
            await site.start()
            runners.append(runner)
            ports.append(runner.addresses[0][1])
        scraper = Scraper()
        out = []
        own = f"http://127.0.0.1:{ports[0]}"
        for metrics_url in (None, f"http://127.0.0.1:{ports[1]}/metrics"):
            config = BackendConfig.model_validate({"url": own + "/v1", "metrics": {"url": metrics_url}})
            load = await scraper.scrape(Backend("x", config, Secret("sk-scrape-secret-0123456789")))
            out.append((load.waiting, load.kv_usage, load.engine))
        await scraper.close()
        for runner in runners:
            await runner.cleanup()
        return out

    loads = asyncio.run(main())
    assert loads == [(2.0, 0.5, "sglang"), (2.0, 0.5, "sglang")]
    assert seen == ["Bearer sk-scrape-secret-0123456789", None]


def test_a_reload_starts_and_stops_the_scrapes(tmp_path: Path) -> None:
    prom = tmp_path / "a.prom"
    waiting(prom, 3)
    path = tmp_path / "gw.yaml"

    def write(policy: str) -> None:
        target = {"backend": ["a", "b"], "policy": policy}
        backends = {n: {"url": f.base_url, "metrics": {"interval_s": 0.1}} for n, f in (("a", a), ("b", b))}
        path.write_text(config_text(backends, [{"model": "m", "backends": [target]}]))

    with (
        FakeServerThread({**FAST, "metrics_text_path": str(prom)}) as a,
        FakeServerThread({**FAST, "metrics_text_path": str(prom)}) as b,
    ):
        write("least_in_flight")
        with GatewayThread(path.read_text(), path=path) as gw:
            # cast: mypy would keep this narrowing past the calls below that change it
            assert "load" not in state(gw)["backends"]["a"] and cast(object, gw.gw.scraper) is None
            write("least_queue")
            assert gw.call(gw.gw.reload) is True
            until(lambda: state(gw)["backends"]["a"]["load"].get("waiting") == 3)
            assert gw.gw.scraper is not None and gw.call(gw.gw.scraper.following) == ["a", "b"]
            write("least_in_flight")
            assert gw.call(gw.gw.reload) is True
            assert "load" not in state(gw)["backends"]["a"]
            scraper = gw.gw.scraper
            assert scraper is not None and gw.call(scraper.following) == []


@pytest.mark.slow
def test_check_names_the_pool_policies(tmp_path: Path) -> None:
    path = tmp_path / "gw.yaml"
    target = {"backend": ["a", "b"], "policy": "prefix_affinity"}
    path.write_text(
        config_text(
            {"a": {"url": "http://a:1/v1"}, "b": {"url": "http://b:1/v1"}}, [{"model": "m", "backends": [target]}]
        )
    )
    out = subprocess.run(
        [sys.executable, "-m", "tokenrace", "gateway", "check", "--no-env", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert out.returncode == 0, out.stderr
    assert "prefix_affinity pool on m: a, b" in out.stdout
