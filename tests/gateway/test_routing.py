"""Weighted splits (checked statistically), sticky pinning, canary shares, pools, attempt order."""

from __future__ import annotations

import math
from collections import Counter

import yaml

from tokenrace.gateway.config import parse_config, resolve_secrets
from tokenrace.gateway.runtime import Runtime

ENV = {"K": "client-key-123456"}


def runtime(routes: list[dict[str, object]], backends: tuple[str, ...] = ("a", "b", "c", "d")) -> Runtime:
    doc = {
        "backends": {n: {"url": f"http://{n}.example:8000/v1"} for n in backends},
        "routes": routes,
        "auth": {"keys": [{"name": "t", "key_env": "K"}]},
    }
    config = parse_config(yaml.safe_dump(doc), "t.yaml", ENV)
    return Runtime(config, resolve_secrets(config, ENV), generation=1)


def first_choice(rt: Runtime, n: int, sticky: str | None = None) -> Counter[str]:
    route = rt.routes["m"]
    return Counter(route.plan(route.point(sticky))[0][0].label for _ in range(n))


def within_sigmas(count: int, n: int, p: float, sigmas: float = 5.0) -> bool:
    return abs(count - n * p) <= sigmas * math.sqrt(n * p * (1 - p))


def test_95_5_split_is_95_5() -> None:
    rt = runtime([{"model": "m", "backends": [{"backend": "a", "weight": 95}, {"backend": "b", "weight": 5}]}])
    n = 20_000
    counts = first_choice(rt, n)
    assert within_sigmas(counts["b"], n, 0.05), counts
    assert counts["a"] + counts["b"] == n


def test_three_way_split_passes_a_chi_square_test() -> None:
    weights = {"a": 60, "b": 30, "c": 10}
    rt = runtime([{"model": "m", "backends": [{"backend": k, "weight": w} for k, w in weights.items()]}])
    n = 30_000
    counts = first_choice(rt, n)
    chi2 = sum((counts[k] - n * w / 100) ** 2 / (n * w / 100) for k, w in weights.items())
    assert chi2 < 18.4, (chi2, counts)  # p < 0.0001 for 2 degrees of freedom


def test_a_sticky_header_pins_a_user_and_still_splits_users_by_weight() -> None:
    rt = runtime(
        [
            {
                "model": "m",
                "backends": [{"backend": "a", "weight": 90}, {"backend": "b", "weight": 10}],
                "sticky_header": "x-user",
            }
        ]
    )
    route = rt.routes["m"]
    for user in ("alice", "bob", "carol"):
        picks = {route.plan(route.point(user))[0][0].label for _ in range(50)}
        assert len(picks) == 1
    n = 20_000
    users = Counter(route.plan(route.point(f"user-{i}"))[0][0].label for i in range(n))
    assert within_sigmas(users["b"], n, 0.10), users


def test_canary_takes_its_weight_and_pinned_users_stay_as_it_widens() -> None:
    rt = runtime(
        [
            {
                "model": "m",
                "backends": ["a"],
                "canary": {"backend": "b", "steps": [5, 25, 100]},
                "sticky_header": "x-user",
            }
        ]
    )
    route = rt.routes["m"]
    assert route.canary is not None
    n = 20_000
    on_canary = {f"u{i}" for i in range(n) if route.plan(route.point(f"u{i}"))[0][1] == "canary"}
    assert within_sigmas(len(on_canary), n, 0.05)
    route.canary.weight = 25
    wider = {f"u{i}" for i in range(n) if route.plan(route.point(f"u{i}"))[0][1] == "canary"}
    assert on_canary <= wider and within_sigmas(len(wider), n, 0.25)
    route.canary.weight = 0
    assert all(route.plan(route.point(f"u{i}"))[0][1] == "baseline" for i in range(1000))


def test_attempt_order_canary_then_baseline_then_fallbacks() -> None:
    rt = runtime([{"model": "m", "backends": ["a"], "fallback": ["c", "d"], "canary": {"backend": "b"}}])
    route = rt.routes["m"]
    assert route.canary is not None
    route.canary.weight = 100
    chain = [(t.label, arm) for t, arm in route.plan(0.5)]
    assert chain == [("b", "canary"), ("a", "fallback"), ("c", "fallback"), ("d", "fallback")]
    route.canary.weight = 0
    assert [(t.label, arm) for t, arm in route.plan(0.5)] == [("a", "baseline"), ("c", "fallback"), ("d", "fallback")]


def test_default_fallback_is_the_other_targets_heaviest_first() -> None:
    rt = runtime(
        [
            {
                "model": "m",
                "backends": [
                    {"backend": "a", "weight": 1},
                    {"backend": "b", "weight": 3},
                    {"backend": "c", "weight": 2},
                ],
            }
        ]
    )
    route = rt.routes["m"]
    labels = [t.label for t, _ in route.plan(0.0)]  # u=0 falls on the first target, a
    assert labels == ["a", "b", "c"]
    labels = [t.label for t, _ in route.plan(0.99)]
    assert labels == ["c", "b", "a"]


def test_a_pool_sends_to_the_least_busy_instance_and_retries_elsewhere() -> None:
    rt = runtime([{"model": "m", "backends": [{"backend": ["a", "b", "c"]}]}])
    target = rt.routes["m"].targets[0]
    a, b, c = (rt.backends[n] for n in "abc")
    a.in_flight, b.in_flight, c.in_flight = 5, 1, 3
    assert target.pick(set(), 0.0)[0] is b
    assert target.pick({"b"}, 0.0)[0] is c  # a retry prefers an instance not tried yet
    b.in_flight = b.config.max_in_flight
    assert target.pick(set(), 0.0)[0] is c  # a saturated instance is skipped
    for backend in (a, b, c):
        backend.breaker.force("open", "test", 0.0)
    picked, why = target.pick(set(), 1.0)
    assert picked is None and why in ("breaker_open", "saturated")


def test_equal_instances_share_evenly() -> None:
    rt = runtime([{"model": "m", "backends": [{"backend": ["a", "b"]}]}])
    target = rt.routes["m"].targets[0]
    counts = Counter(target.pick(set(), 0.0)[0].name for _ in range(2000))
    assert within_sigmas(counts["a"], 2000, 0.5)
