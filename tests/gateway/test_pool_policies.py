"""The pool policies alone (gateway/routing.py): hash ring, bounded loads, queue readings, keys."""

from __future__ import annotations

import math
import os
import random
import subprocess
import sys
from collections import Counter
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tokenrace.gateway import routing
from tokenrace.gateway.body import RequestBody
from tokenrace.gateway.routing import (
    Candidate,
    HashRing,
    Load,
    Placements,
    RecentPeak,
    bounded_load,
    clearly_over,
    hash64,
    least_in_flight,
    least_queue,
    parse_load,
)

NAMES = ["a", "b", "c", "d"]
RNG = random.Random(7)


def cands(loads: dict[str, int], tried: tuple[str, ...] = ()) -> list[Candidate]:
    return [Candidate(n, v, n in tried) for n, v in loads.items()]


# --- the ring ----------------------------------------------------------------------------------


def test_ring_arcs_are_near_equal_and_walk_meets_each_instance_once() -> None:
    ring = HashRing(NAMES)
    shares = ring.shares()
    assert math.isclose(sum(shares.values()), 1.0, abs_tol=1e-3)
    assert all(0.18 < s < 0.32 for s in shares.values()), shares
    for point in (0, 2**63, 2**64 - 1, hash64("x")):
        assert sorted(ring.walk(point)) == NAMES


def test_same_key_same_instance_and_keys_spread_over_all() -> None:
    ring = HashRing(NAMES)
    idle = cands(dict.fromkeys(NAMES, 0))
    homes = {k: bounded_load(ring, hash64(k), idle, 1.25, RNG).name for k in (f"s{i}" for i in range(400))}
    assert all(bounded_load(ring, hash64(k), idle, 1.25, RNG).name == h for k, h in homes.items())
    spread = Counter(homes.values())
    assert set(spread) == set(NAMES) and min(spread.values()) > 50, spread


def test_removing_an_instance_moves_only_its_own_keys() -> None:
    keys = [f"user-{i}" for i in range(500)]
    full, less = HashRing(NAMES), HashRing(["a", "b", "d"])
    idle4, idle3 = cands(dict.fromkeys(NAMES, 0)), cands(dict.fromkeys(["a", "b", "d"], 0))
    for k in keys:
        before = bounded_load(full, hash64(k), idle4, 1.25, RNG).name
        after = bounded_load(less, hash64(k), idle3, 1.25, RNG).name
        if before != "c":
            assert after == before


# --- bounded loads --------------------------------------------------------------------------------


def test_a_clearly_full_home_spills_to_the_next_instance_on_the_ring() -> None:
    ring = HashRing(NAMES)
    point = hash64("hot")
    home, second = list(ring.walk(point))[:2]
    loads = dict.fromkeys(NAMES, 1)
    loads[home] = 12  # 13 of 16 with the new one: clearly over 1.25 / 4 (capacity 5)
    assert clearly_over(12, 16, 1.25, 4)
    choice = bounded_load(ring, point, cands(loads), 1.25, RNG)
    assert (choice.name, choice.reason) == (second, "over_capacity")
    loads[home] = 1
    assert bounded_load(ring, point, cands(loads), 1.25, RNG).reason == "home"


def test_a_home_over_its_capacity_by_chance_keeps_its_keys() -> None:
    """Two or three requests on one instance of three is over ceil(1.25 * m / n) but says nothing."""
    ring = HashRing(NAMES[:3])
    point = hash64("s1")
    home = next(ring.walk(point))
    loads = {n: (2 if n == home else 0) for n in NAMES[:3]}  # capacity ceil(1.25 * 3 / 3) = 2: at it
    assert not clearly_over(2, 3, 1.25, 3)
    assert bounded_load(ring, point, cands(loads), 1.25, RNG, Placements()).reason == "home"
    # 9 of 24 sessions homed on one instance, all in flight but the one arriving: 9 / 24 stays.
    assert not clearly_over(8, 24, 1.25, 3) and not clearly_over(16, 24, 1.25, 3) and clearly_over(17, 24, 1.25, 3)


def test_a_key_that_left_stays_away_while_home_is_full_then_comes_back_once() -> None:
    ring = HashRing(NAMES)
    point = hash64("conversation-7")
    home, second = list(ring.walk(point))[:2]
    placed = Placements()
    loads = dict.fromkeys(NAMES, 1)
    assert bounded_load(ring, point, cands(loads), 1.25, RNG, placed).reason == "home"
    loads[home] = 12
    left = bounded_load(ring, point, cands(loads), 1.25, RNG, placed)
    assert (left.name, left.reason, left.moved_from) == (second, "moved", home)
    assert left.detail == f"from {home} (over_capacity)"
    loads[home] = 5  # at the capacity (ceil(1.25 * 9 / 4) = 3) but no longer clearly over: stays away
    assert bounded_load(ring, point, cands(loads), 1.25, RNG, placed).reason == "away"
    loads[home] = 1  # under it: back home, counted as a move once
    back = bounded_load(ring, point, cands(loads), 1.25, RNG, placed)
    assert (back.name, back.reason, back.detail) == (home, "moved", f"from {second} (back home)")
    assert bounded_load(ring, point, cands(loads), 1.25, RNG, placed).reason == "home"


def test_a_pool_emptying_after_a_burst_moves_nobody() -> None:
    """Seven of the last eight requests on one home is clearly over the bound for a pool of eight,
    not for one that had 24 in flight a moment ago; the recent peak is forgotten by halves."""
    ring = HashRing(NAMES[:3])
    point = hash64("s-last")
    home = next(ring.walk(point))
    loads = {n: (7 if n == home else 0) for n in NAMES[:3]}
    assert bounded_load(ring, point, cands(loads), 1.25, RNG, Placements()).reason == "over_capacity"
    peak = RecentPeak(half_life_s=10)
    assert peak.update(24, now=100.0) == 24
    recent = peak.update(8, now=101.0)
    assert 22 < recent < 24
    assert bounded_load(ring, point, cands(loads), 1.25, RNG, Placements(), recent).reason == "home"
    assert peak.update(8, now=200.0) == 8  # ten half-lives later: the pool's load is what it is now


def test_placements_forget_the_least_recently_seen_key() -> None:
    placed = Placements(limit=2)
    placed.put(1, "a")
    placed.put(2, "b")
    placed.get(1)
    placed.put(1, "c")
    placed.put(3, "d")
    assert (placed.get(1), placed.get(2), placed.get(3), len(placed)) == ("c", None, "d", 2)


@pytest.mark.slow
def test_the_ring_is_the_same_in_every_process() -> None:
    """blake2b, not hash(): another interpreter with another hash seed builds the same ring."""
    code = "from tokenrace.gateway.routing import HashRing; r = HashRing(['a', 'b', 'c']); print(r.points[:5], r.owners[:5])"
    runs = {
        subprocess.run(
            [sys.executable, "-c", code],
            env={**os.environ, "PYTHONHASHSEED": seed},
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for seed in ("1", "2")
    }
    ring = HashRing(["a", "b", "c"])
    assert runs == {f"{ring.points[:5]} {ring.owners[:5]}\n"}


def test_a_failed_or_unavailable_home_is_passed_over() -> None:
    ring = HashRing(NAMES)
    point = hash64("k")
    home, second = list(ring.walk(point))[:2]
    choice = bounded_load(ring, point, cands(dict.fromkeys(NAMES, 0), tried=(home,)), 1.25, RNG)
    assert (choice.name, choice.reason) == (second, "home_unavailable")
    without = cands({n: 0 for n in NAMES if n != home})  # its breaker is open: not a candidate
    assert bounded_load(ring, point, without, 1.25, RNG).name == second


def test_no_key_is_least_in_flight() -> None:
    choice = bounded_load(HashRing(NAMES), None, cands({"a": 3, "b": 1, "c": 2, "d": 5}), 1.25, RNG)
    assert (choice.name, choice.reason) == ("b", "no_key")


@pytest.mark.slow
@given(
    st.lists(st.integers(0, 5), min_size=1, max_size=300),
    st.sampled_from([1.0, 1.25, 2.0]),
)
def test_an_instance_goes_past_the_bound_only_as_a_home_not_clearly_over_it(keys: list[int], factor: float) -> None:
    """Whatever the keys (a few hot ones included): each placement is under the capacity, or on the
    key's own home while that home's share is not clearly over the bound (the hysteresis)."""
    ring = HashRing(NAMES)
    placed = Placements()
    loads = dict.fromkeys(NAMES, 0)
    for i, k in enumerate(keys):
        if i % 3 == 2:  # some requests end
            busiest = max(loads, key=lambda n: loads[n])
            loads[busiest] = max(0, loads[busiest] - 1)
        total = sum(loads.values()) + 1
        capacity = math.ceil(factor * total / len(loads))
        point = hash64(f"k{k}")
        name = bounded_load(ring, point, cands(loads), factor, RNG, placed).name
        home = next(ring.walk(point))
        assert loads[name] < capacity or (name == home and not clearly_over(loads[name], total, factor, len(loads)))
        loads[name] += 1


# --- least in flight, least queue -------------------------------------------------------------------


def test_least_in_flight_prefers_untried_then_fewest() -> None:
    assert least_in_flight(cands({"a": 0, "b": 4}, tried=("a",)), RNG).name == "b"
    assert least_in_flight(cands({"a": 2, "b": 1}), RNG).name == "b"


def reading(waiting: float | None, kv: float | None = None, at: float = 100.0, in_flight_at: int = 0) -> Load:
    return Load(at, in_flight_at, waiting, kv, "vllm")


def test_least_queue_picks_the_shortest_queue_then_the_emptier_cache() -> None:
    now = 100.5
    pool = [
        Candidate("a", 5, load=reading(4, 0.1, in_flight_at=5)),
        Candidate("b", 9, load=reading(1, 0.9, in_flight_at=9)),
    ]
    assert least_queue(pool, now, RNG).name == "b"  # b is busier for the gateway but the engine has room
    tie = [Candidate("a", 0, load=reading(2, 0.8)), Candidate("b", 0, load=reading(2, 0.3))]
    assert least_queue(tie, now, RNG).name == "b"


def test_requests_sent_since_the_scrape_count_as_waiting() -> None:
    now = 100.5
    # a read 0 waiting, but the gateway has sent it 5 more since; b read 2 waiting, nothing sent since.
    pool = [Candidate("a", 5, load=reading(0, in_flight_at=0)), Candidate("b", 1, load=reading(2, in_flight_at=1))]
    assert least_queue(pool, now, RNG).name == "b"


def test_one_unusable_reading_falls_back_to_in_flight_and_says_why() -> None:
    now = 100.5
    good = Candidate("a", 4, load=reading(0), stale_s=3)
    for other, why in [
        (Candidate("b", 1), "b: no reading yet"),
        (Candidate("b", 1, load=Load(100, 0, error="HTTP 404")), "b: scrape failed (HTTP 404)"),
        (Candidate("b", 1, load=Load(100, 0, kv_usage=0.2)), "b: no queue gauge in /metrics"),
        (Candidate("b", 1, load=reading(0, at=90), stale_s=3), "b: reading 10.5 s old"),
    ]:
        choice = least_queue([good, other], now, RNG)
        assert (choice.name, choice.reason, choice.detail) == ("b", "in_flight_fallback", why)


def test_engine_gauges_are_read_from_prometheus_text() -> None:
    vllm = (
        "# TYPE vllm:num_requests_waiting gauge\n"
        'vllm:num_requests_waiting{engine="0",model_name="m"} 3.0\n'
        'vllm:num_requests_waiting{engine="1",model_name="m"} 2.0\n'
        "# TYPE vllm:kv_cache_usage_perc gauge\n"
        'vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.25\n'
        'vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.5\n'
    )
    load = parse_load(vllm, 1.0, 2)
    assert (load.engine, load.waiting, load.kv_usage, load.in_flight_at) == ("vllm", 5.0, 0.5, 2)
    sglang = "# TYPE sglang:num_queue_reqs gauge\nsglang:num_queue_reqs 7\nsglang:token_usage 0.4\n"
    assert (parse_load(sglang, 0, 0).engine, parse_load(sglang, 0, 0).waiting) == ("sglang", 7.0)
    llama = "llamacpp:requests_deferred 1\nllamacpp:kv_cache_usage_ratio 0.75\n"
    assert (parse_load(llama, 0, 0).waiting, parse_load(llama, 0, 0).kv_usage) == (1.0, 0.75)
    old_vllm = "vllm:num_requests_waiting 0\nvllm:gpu_cache_usage_perc 0.1\n"
    assert parse_load(old_vllm, 0, 0).kv_usage == 0.1
    assert parse_load("process_cpu_seconds_total 3\n", 0, 0).waiting is None
    assert parse_load("vllm:num_requests_waiting{ 3\n", 0, 0).error is not None


# --- keys --------------------------------------------------------------------------------------------


def affinity_key(session: str | None, body: dict[str, Any], prefix_chars: int) -> str | None:
    """routing.affinity_key of a request with this JSON body."""
    return routing.affinity_key(session, RequestBody(body), prefix_chars)


def prompt_prefix(body: dict[str, Any], limit: int) -> str:
    return RequestBody(body).prompt_prefix(limit)


def test_the_session_header_wins_over_the_prompt() -> None:
    body = {"messages": [{"role": "user", "content": "hello"}]}
    assert affinity_key("s-1", body, 64) == affinity_key("s-1", {"messages": []}, 64)
    assert affinity_key(None, body, 64) != affinity_key("s-1", body, 64)
    assert affinity_key(None, {"messages": []}, 64) is None


def test_the_turns_of_a_conversation_share_a_prompt_key() -> None:
    system = {"role": "system", "content": "You are terse."}
    turn1 = {"messages": [system, {"role": "user", "content": "first question " * 20}]}
    turn2 = {
        "messages": [
            *turn1["messages"],
            {"role": "assistant", "content": "an answer"},
            {"role": "user", "content": "and then?"},
        ]
    }
    other = {"messages": [system, {"role": "user", "content": "another topic " * 20}]}
    assert affinity_key(None, turn1, 128) == affinity_key(None, turn2, 128)
    assert affinity_key(None, turn1, 128) != affinity_key(None, other, 128)
    assert len(prompt_prefix(turn2, 128)) == 128
    # A short first turn: the key still ends with the first user message, not with the prompt.
    short1 = {"messages": [system, {"role": "user", "content": "hi"}]}
    short2 = {
        "messages": [*short1["messages"], {"role": "assistant", "content": "hello"}, {"role": "user", "content": "?"}]
    }
    assert affinity_key(None, short1, 512) == affinity_key(None, short2, 512)


def test_completion_prompts_and_content_parts_make_keys() -> None:
    assert prompt_prefix({"prompt": "abcdef"}, 3) == "abc"
    assert prompt_prefix({"prompt": ["abcdef", "zz"]}, 4) == "abcd"
    parts = {"messages": [{"role": "user", "content": [{"type": "text", "text": "look"}, {"type": "image_url"}]}]}
    assert "look" in prompt_prefix(parts, 64)
