"""Two real gateway processes on one real redis-server behave as one gateway.

Each test starts its own `redis-server` (Debian's) on a free port and two `tokenrace gateway`
processes whose configs say `state: {redis_url_env: GW_REDIS_URL}`.
"""

from __future__ import annotations

import asyncio
import json
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from tokenrace.fakes.fake_server import FakeServerThread
from tokenrace.gateway.config import ConfigError, Secret, StateConfig, parse_config, resolve_secrets
from tokenrace.gateway.runtime import Runtime
from tokenrace.gateway.shared import SharedState

from .conftest import require_redis_server
from .helpers import ADMIN_KEY, AUTH, ENV, chat, config_text, http, spawn_gateway

FOLLOW_WITHIN_S = 1.0  # the documented bound; the assertions allow 3x on this shared machine


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class RedisServer:
    """A throwaway redis-server (no persistence) that a test can kill and start again."""

    def __init__(self, binary: str, workdir: Path) -> None:
        self.binary = binary
        self.port = free_port()
        self.workdir = workdir
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        argv = [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
        self.proc = subprocess.Popen(
            [*argv, "--dir", str(self.workdir)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        client = redis.Redis(port=self.port, socket_timeout=1)
        wait_for(lambda: _pings(client), 10, "redis-server did not start")

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def shutdown_saving(self) -> None:
        """Stop as a restart with persistence does: the data is saved and read back on start()."""
        try:
            self.client().shutdown(save=True)
        except redis.ConnectionError:
            pass  # the server closes the connection as it exits
        if self.proc is not None:
            self.proc.wait(10)

    def client(self) -> redis.Redis:
        return redis.Redis(port=self.port, socket_timeout=2, decode_responses=True)


def _pings(client: redis.Redis) -> bool:
    try:
        return bool(client.ping())
    except redis.RedisError:
        return False


def wait_for(check: Callable[[], Any], timeout: float, what: str, every: float = 0.05) -> float:
    """Poll until check() is truthy; returns the seconds it took."""
    start = time.monotonic()
    while not check():
        if time.monotonic() - start > timeout:
            raise AssertionError(f"{what} (after {timeout} s)")
        time.sleep(every)
    return time.monotonic() - start


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    server = RedisServer(require_redis_server(), tmp_path)
    server.start()
    yield server
    server.kill()


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeServerThread]:
    with FakeServerThread({"ttft_ms": 2, "itl_ms": 1, "output_tokens": 4, "models": ["m"]}) as srv:
        yield srv


@pytest.fixture(scope="module")
def fake_canary() -> Iterator[FakeServerThread]:
    with FakeServerThread({"ttft_ms": 2, "itl_ms": 1, "output_tokens": 4, "models": ["m"]}) as srv:
        yield srv


Pair = tuple[str, str]


class Fleet:
    """fleet(backends, routes, **extra) -> (url A, url B): two gateway processes on one Redis."""

    def __init__(self, redis_server: RedisServer, workdir: Path) -> None:
        self.redis_server = redis_server
        self.workdir = workdir
        self.prefix = f"test:{uuid.uuid4().hex[:8]}"
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def __call__(self, backends: dict[str, Any], routes: list[dict[str, Any]], **extra: Any) -> Pair:
        state = {"redis_url_env": "GW_REDIS_URL", "key_prefix": self.prefix, **extra.pop("state", {})}
        path = self.workdir / "gateway.yaml"
        path.write_text(config_text(backends, routes, state=state, **extra))
        urls = []
        for _ in range(2):
            proc, url = spawn_gateway(path, env={"GW_REDIS_URL": self.redis_server.url})
            self.procs[url] = proc
            urls.append(url)
        return urls[0], urls[1]


@pytest.fixture
def two_gateways(redis_server: RedisServer, tmp_path: Path) -> Iterator[Fleet]:
    fleet = Fleet(redis_server, tmp_path)
    yield fleet
    for proc in fleet.procs.values():
        stop(proc)


def stop(proc: subprocess.Popen[bytes]) -> str:
    """Stop a gateway (SIGTERM, then kill); returns what it logged on stderr."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
    return proc.stderr.read().decode() if proc.stderr is not None else ""


def admin_state(url: str) -> dict[str, Any]:
    status, _, raw = http("GET", url + "/admin/state", key=ADMIN_KEY)
    assert status == 200, raw
    state: dict[str, Any] = json.loads(raw)
    return state


def metric(url: str, name: str) -> float | None:
    """The value of an unlabelled sample in /metrics; None when it is not exported."""
    _, _, raw = http("GET", url + "/metrics", key=None)
    for line in raw.decode().splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return None


def ask(url: str, **body: Any) -> tuple[int, dict[str, str]]:
    status, headers, _ = http("POST", url + "/v1/chat/completions", chat(stream=False, **body))
    return status, {k.lower(): v for k, v in headers.items()}


def leader_and_follower(a: str, b: str) -> tuple[str, str]:
    def one_leader() -> bool:
        flags = [admin_state(u)["state"]["canary_leader"] for u in (a, b)]
        return sorted(flags) == [False, True]

    wait_for(one_leader, 10, "exactly one instance should hold the canary lease")
    return (a, b) if admin_state(a)["state"]["canary_leader"] else (b, a)


# --- rate limits ------------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_rate_limit_holds_across_both_instances(fake: FakeServerThread, two_gateways: Fleet) -> None:
    # 10 tokens and a negligible refill: 10 requests may pass in all, whichever instance they reach.
    limited = {"keys": [{**AUTH["keys"][0], "rate_limit": {"rps": 0.01, "burst": 10}}]}
    a, b = two_gateways({"a": {"url": fake.base_url}}, [{"model": "m", "backends": ["a"]}], auth=limited)
    answers = [(url, *ask(url)) for _ in range(15) for url in (a, b)]
    admitted = [url for url, status, _ in answers if status == 200]
    limited_answers = [h for _, status, h in answers if status == 429]
    assert len(admitted) == 10, [s for _, s, _ in answers]  # one instance alone would admit 10 itself
    assert len(limited_answers) == 20 and all("retry-after" in h for h in limited_answers)
    assert admitted.count(a) >= 1 and admitted.count(b) >= 1
    assert admin_state(a)["state"]["backend"] == "redis" and admin_state(a)["state"]["up"] is True


# --- canary -----------------------------------------------------------------------------------------


def canary_fleet(fleet: Fleet, fake: FakeServerThread, fake_canary: FakeServerThread, **canary: Any) -> tuple[str, str]:
    """Two instances with a canary on route m (baseline a, canary c); returns (leader, follower)."""
    backends = {"a": {"url": fake.base_url}, "c": {"url": fake_canary.base_url}}
    a, b = fleet(backends, [{"model": "m", "backends": ["a"], "canary": {"backend": "c", **canary}}])
    return leader_and_follower(a, b)


@pytest.mark.slow
def test_a_rollback_on_one_instance_is_followed_by_the_other(
    fake: FakeServerThread, fake_canary: FakeServerThread, two_gateways: Fleet
) -> None:
    leader, follower = canary_fleet(two_gateways, fake, fake_canary, steps=[50, 100], hold_s=600)
    wait_for(lambda: admin_state(follower)["routes"]["m"]["canary"]["weight_pct"] == 50, 5, "follower at step 1")
    status, _, raw = http("POST", follower + "/admin/canary/m/rollback", key=ADMIN_KEY)
    assert status == 200, raw
    seen = wait_for(
        lambda: admin_state(leader)["routes"]["m"]["canary"]["state"] == "rolled_back",
        3 * FOLLOW_WITHIN_S,
        "the other instance did not follow the rollback",
    )
    print(f"rollback followed after {seen:.3f} s (polled every 0.05 s)")
    canary = admin_state(leader)["routes"]["m"]["canary"]
    assert canary["weight_pct"] == 0
    last = canary["decisions"][-1]
    assert last["action"] == "rollback" and last["by"] == "admin"
    assert last["instance"] == admin_state(follower)["state"]["instance"]
    # The leader now sends nothing to the canary.
    assert {ask(leader)[1]["x-tokenrace-backend"] for _ in range(10)} == {"a"}


@pytest.mark.slow
def test_when_the_lease_holder_stops_the_other_takes_over(
    fake: FakeServerThread, fake_canary: FakeServerThread, two_gateways: Fleet
) -> None:
    leader, follower = canary_fleet(two_gateways, fake, fake_canary, steps=[50, 100], hold_s=600)
    log = stop(two_gateways.procs[leader])
    assert '"canary_lease_taken"' in log
    # The stopping holder releases its lease: the other takes it on its next sync, not after lease_s.
    took = wait_for(lambda: admin_state(follower)["state"]["canary_leader"], 5, "the follower did not take the lease")
    print(f"lease taken over after {took:.3f} s")
    assert metric(follower, "tokenrace_gateway_state_leader") == 1
    status, _, raw = http("POST", follower + "/admin/canary/m/pause", key=ADMIN_KEY)
    assert status == 200 and json.loads(raw)["canary"]["state"] == "paused"


@pytest.mark.slow
def test_the_lease_holder_decides_on_samples_from_both_instances(
    fake: FakeServerThread, fake_canary: FakeServerThread, two_gateways: Fleet
) -> None:
    # A wide latency margin: 5 requests on a busy machine must not read as a latency breach.
    canary = {"steps": [50, 100], "hold_s": 1.0, "min_requests": 5, "eval_interval_s": 0.2}
    canary["margin"] = {"latency_ms": 5000}
    leader, follower = canary_fleet(two_gateways, fake, fake_canary, **canary)
    leader_id = admin_state(leader)["state"]["instance"]

    # Traffic only through the follower: the leader can advance only on the samples it is sent.
    def advanced() -> bool:
        for _ in range(5):
            ask(follower)
        return bool(admin_state(follower)["routes"]["m"]["canary"]["weight_pct"] >= 100)

    wait_for(advanced, 20, "the canary did not advance on the follower's traffic", every=0.1)
    assert metric(leader, 'tokenrace_gateway_client_requests_total{client="tester"}') is None
    decisions = admin_state(follower)["routes"]["m"]["canary"]["decisions"]
    assert any(d["action"] == "advance" for d in decisions)
    assert {d["instance"] for d in decisions if d["by"] == "auto"} == {leader_id}

    def same_log() -> bool:
        logs = [admin_state(u)["routes"]["m"]["canary"]["decisions"] for u in (leader, follower)]
        return bool(logs[0] == logs[1])

    wait_for(same_log, 3 * FOLLOW_WITHIN_S, "the two instances show different decision logs")


# --- breakers ---------------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_breaker_opened_on_one_instance_is_open_on_the_other(fake: FakeServerThread, two_gateways: Fleet) -> None:
    dead = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens: every attempt fails to connect
    backends = {"dead": {"url": dead, "breaker": {"failures": 1, "open_s": 60}}, "a": {"url": fake.base_url}}
    routes = [{"model": "m", "backends": ["dead"], "fallback": ["a"]}]
    a, b = two_gateways(backends, routes, retry={"attempts": 1})
    assert admin_state(b)["backends"]["dead"]["breaker"]["state"] == "closed"
    status, headers = ask(a)
    assert status == 200 and headers["x-tokenrace-backend"] == "a"
    assert admin_state(a)["backends"]["dead"]["breaker"]["state"] == "open"
    seen = wait_for(
        lambda: admin_state(b)["backends"]["dead"]["breaker"]["state"] == "open",
        3 * FOLLOW_WITHIN_S,
        "the other instance did not open its breaker",
    )
    print(f"breaker open followed after {seen:.3f} s")
    assert metric(b, 'tokenrace_gateway_breaker_state{backend="dead"}') == 2
    # b sent nothing to `dead` itself, and now skips it.
    assert metric(b, 'tokenrace_gateway_upstream_attempts_total{backend="dead",outcome="connect",route="m"}') is None
    assert ask(b)[1]["x-tokenrace-backend"] == "a"


# --- Redis going away -------------------------------------------------------------------------------


@pytest.mark.slow
def test_traffic_goes_on_when_redis_stops_and_sharing_resumes_when_it_returns(
    fake: FakeServerThread, redis_server: RedisServer, two_gateways: Fleet
) -> None:
    limited = {"keys": [{**AUTH["keys"][0], "rate_limit": {"rps": 1000, "burst": 1000}}]}
    a, b = two_gateways({"a": {"url": fake.base_url}}, [{"model": "m", "backends": ["a"]}], auth=limited)
    for url in (a, b):
        assert ask(url)[0] == 200
        assert metric(url, "tokenrace_gateway_state_backend_up") == 1
        assert metric(url, "tokenrace_gateway_state_fallbacks_total") == 0

    redis_server.kill()
    statuses = [ask(url)[0] for _ in range(10) for url in (a, b)]
    assert statuses == [200] * 20
    for url in (a, b):

        def down(u: str = url) -> bool:
            return metric(u, "tokenrace_gateway_state_backend_up") == 0

        wait_for(down, 5, "backend_up should drop")
        assert metric(url, "tokenrace_gateway_state_fallbacks_total") == 1
        state = admin_state(url)["state"]
        assert state["up"] is False and state["canary_leader"] is False and state["last_error"]
        assert ask(url)[0] == 200

    redis_server.start()  # same port, empty
    for url in (a, b):

        def up(u: str = url) -> bool:
            return metric(u, "tokenrace_gateway_state_backend_up") == 1

        wait_for(up, 10, "should reconnect")
    prefix = admin_state(a)["state"]["key_prefix"]
    assert ask(a)[0] == 200 and ask(b)[0] == 200
    assert redis_server.client().exists(f"{prefix}:rate:tester") == 1  # the shared bucket is back in use


@pytest.mark.slow
def test_a_rollback_taken_while_redis_was_away_is_kept_when_it_returns(
    fake: FakeServerThread, fake_canary: FakeServerThread, redis_server: RedisServer, two_gateways: Fleet
) -> None:
    leader, follower = canary_fleet(two_gateways, fake, fake_canary, steps=[50, 100], hold_s=600)
    redis_server.shutdown_saving()  # the shared ramp (running, 50 %) comes back with it
    wait_for(lambda: metric(follower, "tokenrace_gateway_state_backend_up") == 0, 5, "backend_up should drop")
    status, _, raw = http("POST", follower + "/admin/canary/m/rollback", key=ADMIN_KEY)
    assert status == 200, raw  # taken locally: the other instance cannot know yet
    assert admin_state(leader)["routes"]["m"]["canary"]["state"] == "running"
    redis_server.start()  # the saved ramp says "running"; the rollback is newer, and a rollback wins
    wait_for(
        lambda: admin_state(leader)["routes"]["m"]["canary"]["state"] == "rolled_back",
        10,
        "the rollback taken during the outage was lost",
    )
    assert admin_state(follower)["routes"]["m"]["canary"]["state"] == "rolled_back"


@pytest.mark.slow
def test_the_outage_is_logged_once_and_the_url_never(
    fake: FakeServerThread, redis_server: RedisServer, tmp_path: Path
) -> None:
    secret_url = f"redis://:{uuid.uuid4().hex}@127.0.0.1:{redis_server.port}/0"
    redis_server.client().config_set("requirepass", secret_url.split(":")[2].split("@")[0])
    path = tmp_path / "gateway.yaml"
    path.write_text(
        config_text(
            {"a": {"url": fake.base_url}}, [{"model": "m", "backends": ["a"]}], state={"redis_url_env": "GW_REDIS_URL"}
        )
    )
    proc, url = spawn_gateway(path, env={"GW_REDIS_URL": secret_url})
    try:
        assert metric(url, "tokenrace_gateway_state_backend_up") == 1
        redis_server.kill()
        wait_for(lambda: metric(url, "tokenrace_gateway_state_backend_up") == 0, 5, "backend_up should drop")
        for _ in range(5):
            assert ask(url)[0] == 200
        time.sleep(1.0)  # several syncs fail meanwhile
        assert json.dumps(admin_state(url)).count(secret_url) == 0
    finally:
        log = stop(proc)
    assert log.count('"state_backend_down"') == 1, log[-3000:]
    assert secret_url not in log and secret_url.split("@")[0] not in log


# --- configuration ----------------------------------------------------------------------------------


def test_state_needs_its_variable_and_a_redis_url() -> None:
    text = config_text({"a": {"url": "http://127.0.0.1:9/v1"}}, [{"model": "m", "backends": ["a"]}])
    with_state = text + "state: {redis_url_env: GW_REDIS_URL}\n"
    with pytest.raises(ConfigError, match="GW_REDIS_URL is not set"):
        parse_config(with_state, "g.yaml", ENV)
    config = parse_config(with_state, "g.yaml", {**ENV, "GW_REDIS_URL": "http://user:hunter2@host"})
    with pytest.raises(ConfigError) as err:
        resolve_secrets(config, {**ENV, "GW_REDIS_URL": "http://user:hunter2@host"})
    assert "redis://" in str(err.value) and "hunter2" not in str(err.value)
    with pytest.raises(ConfigError, match="sync_interval_s"):
        parse_config(text + "state: {redis_url_env: X, sync_interval_s: 2}\n", "g.yaml", {**ENV, "X": "redis://h"})
    secrets = resolve_secrets(config, {**ENV, "GW_REDIS_URL": "redis://:pw-123456@h:6379"})
    assert "redis://:pw-123456@h:6379" in secrets.values()  # so the redactor scrubs it from every log line


def test_without_state_everything_stays_in_memory(fake: FakeServerThread, gateway: Any) -> None:
    gw = gateway({"a": {"url": fake.base_url}}, [{"model": "m", "backends": ["a"]}])
    assert admin_state(gw.url)["state"] == {"backend": "memory", "up": None}
    assert metric(gw.url, "tokenrace_gateway_state_backend_up") is None


# --- the scripts, in-process ------------------------------------------------------------------------


def shared_for(redis_server: RedisServer, prefix: str, **config: Any) -> SharedState:
    state = StateConfig(redis_url_env="GW_REDIS_URL", key_prefix=prefix, **config)
    return SharedState(state, Secret(redis_server.url), lambda *a, **k: None, lambda *a, **k: None, lambda: None)


def test_the_lua_bucket_takes_refills_and_says_how_long_to_wait(redis_server: RedisServer) -> None:
    async def go() -> tuple[list[tuple[bool, float | None]], tuple[bool, float | None]]:
        shared = shared_for(redis_server, "unit:bucket")
        shared.up = True
        taken = [await shared.take("k", 10.0, 2.0) for _ in range(3)]
        await asyncio.sleep(0.25)  # 10 tokens/s: the bucket is full again
        after = await shared.take("k", 10.0, 2.0)
        await shared.close()
        return taken, after

    taken, after = asyncio.run(go())
    assert taken[:2] == [(True, None), (True, None)]
    answered, wait = taken[2]
    assert answered and wait is not None and 0 < wait <= 0.1
    assert after == (True, None)


@pytest.mark.slow
def test_a_canary_write_needs_the_lease_and_the_version_it_read(redis_server: RedisServer) -> None:
    text = config_text(
        {"a": {"url": "http://127.0.0.1:9/v1"}, "c": {"url": "http://127.0.0.1:9/v1"}},
        [{"model": "m", "backends": ["a"], "canary": {"backend": "c"}}],
    )
    env = {**ENV, "GW_REDIS_URL": redis_server.url}
    config = parse_config(text, "g.yaml", env)

    async def go() -> dict[str, Any]:
        one, two = (shared_for(redis_server, "unit:lease", lease_s=1.0) for _ in range(2))
        rt_one, rt_two = (Runtime(config, resolve_secrets(config, env), 1) for _ in range(2))
        route_one, route_two = rt_one.routes["m"], rt_two.routes["m"]
        assert route_one.canary is not None and route_two.canary is not None
        await one.sync(rt_one, lambda *a: None)  # takes the lease, writes the ramp (version 1)
        await two.sync(rt_two, lambda *a: None)  # follows it
        decision = route_one.canary.admin("pause", time.monotonic())
        out: dict[str, Any] = {
            "leaders": (one.leader, two.leader),
            "versions": (route_one.canary.shared_version, route_two.canary.shared_version),
            "forged": await two._write_canary(route_two, route_two.canary, [decision], "someone/1", 1),
            "stale": await one._write_canary(route_one, route_one.canary, [decision], one._token, 0),
            "right": await one._write_canary(route_one, route_one.canary, [decision], one._token, 1),
        }
        old_token = one._token
        await asyncio.sleep(1.2)  # `one` stops renewing: its lease expires and `two` takes it
        await two.sync(rt_two, lambda *a: None)
        out["after_expiry"] = (two.leader, await one._write_canary(route_one, route_one.canary, [], old_token, 2))
        out["followed"] = route_two.canary.state
        await one.close()
        await two.close()
        return out

    out = asyncio.run(go())
    assert out["leaders"] == (True, False) and out["versions"] == (1, 1)
    assert (out["forged"], out["stale"], out["right"]) == (-1, -2, 2)
    assert out["after_expiry"] == (True, -1)  # the old holder is fenced off
    assert out["followed"] == "paused"
