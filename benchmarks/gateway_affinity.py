"""Does prefix affinity raise a pool's prefix-cache hit rate, and what does it do to TTFT?

A pool of N fake OpenAI servers (processes), each with its own simulated prefix cache
(`tokenrace.fakes.fake_cache`: a hit skips `prefill_ms_per_token` for every cached token and is
reported as usage.prompt_tokens_details.cached_tokens), behind one gateway process. For each
workload and pool policy the gateway is started fresh, every cache emptied, and `tokenrace bench`
drives it; the figures are the bench's own (summary.json): cache hit rate = cached / prompt tokens
over the measured requests, TTFT mean/p50/p99 in ms, as a client sees them. In multi-turn runs a
request's hit is nearly all or nothing (the instance served the previous turn or it did not), so
TTFT is bimodal and its mean and p99 show the difference more than its p50.

Workloads:
- `turns`: multi-turn sessions (`--turns`), each turn resending the whole conversation; the bench
  sends each session's id in X-Session-ID, which prefix_affinity keys on;
- `turns-prompt`: the same, with prefix_affinity told to ignore the header (key: the prompt's
  beginning up to its first user message);
- `shared`: independent requests behind K shared system prompts (`--shared-prefix-tokens`);
- `all-in-flight`: `--all-sessions` conversations of `--all-turns` turns, all in flight together
  (concurrency = sessions), with the default affinity settings. Besides the hit rate it prints the
  share of sessions that more than one instance served, read from what each fake server received
  (the session id in X-Session-ID), and the gateway's own count of moves (/admin/state `moved`).

    python benchmarks/gateway_affinity.py                  # 3 instances, 8 sessions, 6 turns
    python benchmarks/gateway_affinity.py --cache-blocks 0 # caches that never evict
    python benchmarks/gateway_affinity.py --instances 4 --requests 480 --prefill-ms 0.2

Each instance's cache holds `--cache-blocks` blocks of 16 tokens (least recently used evicted), as
an engine's KV memory does: spread over every instance, each one has to hold every conversation.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from tokenrace.fakes.fake_server import FakeServerProcess, spawn_fake_server  # noqa: E402

POLICIES = ("least_in_flight", "prefix_affinity")


def fake_config(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "models": ["m"],
        "ttft_ms": args.ttft_ms,
        "itl_ms": args.itl_ms,
        "output_tokens": args.output_tokens,
        "prefix_cache": True,
        "cache_block_size": 16,
        "prefill_ms_per_token": args.prefill_ms,
        "cache_capacity_blocks": args.cache_blocks or None,
        "spin_ms": 0,
    }


def gateway_config(urls: list[str], policy: str, affinity: dict[str, Any] | None) -> str:
    names = [f"i{k}" for k in range(len(urls))]
    target: dict[str, Any] = {"backend": names, "policy": policy}
    if affinity is not None and policy == "prefix_affinity":
        target["affinity"] = affinity
    doc = {
        "backends": {n: {"url": u} for n, u in zip(names, urls, strict=True)},
        "routes": [{"model": "m", "backends": [target]}],
        "auth": {"required": False},
    }
    text: str = yaml.safe_dump(doc, sort_keys=False)
    return text


def spawn_gateway(config: Path) -> tuple[subprocess.Popen[bytes], str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    argv = [sys.executable, "-m", "tokenrace", "gateway", "--config", str(config), "--port", "0"]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
    assert proc.stdout is not None
    line = proc.stdout.readline().decode().strip()
    if not line.startswith("READY "):
        proc.kill()
        raise RuntimeError(f"gateway did not start: {line!r}")
    return proc, line.removeprefix("READY ")


def bench(url: str, workload: list[str], requests: int, args: argparse.Namespace, out: Path) -> dict[str, Any]:
    # No key: the gateway serves without one (auth: required: false) and refuses unknown ones.
    env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"} | {"PYTHONPATH": str(ROOT / "src")}
    argv = [
        sys.executable,
        "-m",
        "tokenrace",
        "bench",
        "--url",
        url + "/v1",
        "--model",
        "m",
        "--requests",
        str(requests),
        "--warmup",
        "0",
        "--no-cold",
        "--no-monitor",
        "--max-tokens",
        str(args.output_tokens),
        "--json",
        "-o",
        str(out),
        *workload,
    ]
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=900)
    if done.returncode != 0:
        raise RuntimeError(f"bench failed: {done.stderr[-2000:]}")
    summary: dict[str, Any] = json.loads((out / "summary.json").read_text())
    return summary


def admin_counts(url: str) -> dict[str, Any]:
    """Requests per instance and per decision reason, from the gateway's /admin/state."""
    with urllib.request.urlopen(url + "/admin/state", timeout=10) as resp:
        state = json.loads(resp.read())
    counts: dict[str, dict[str, int]] = state["routes"]["m"]["targets"][0]["routing"]["counts"]
    reasons: dict[str, int] = {}
    for by_reason in counts.values():
        for reason, n in by_reason.items():
            reasons[reason] = reasons.get(reason, 0) + n
    return {"instances": {n: sum(c.values()) for n, c in counts.items()}, "reasons": reasons}


def sessions_moved(fakes: list[FakeServerProcess]) -> dict[str, Any]:
    """Sessions that more than one instance received, from the fake servers' own logs."""
    instances: dict[str, set[int]] = {}
    for i, fake in enumerate(fakes):
        for entry in fake.log(wait_idle_s=5):
            if entry.get("session_id") is not None:
                instances.setdefault(entry["session_id"], set()).add(i)
    moved = sum(len(seen) > 1 for seen in instances.values())
    return {
        "sessions": len(instances),
        "sessions_moved": moved,
        "moved_share": moved / len(instances) if instances else None,
    }


def reset(fakes: list[FakeServerProcess]) -> None:
    for fake in fakes:
        fake.reset()


def run(args: argparse.Namespace) -> None:
    sessions = [
        "--turns",
        str(args.turns),
        "--concurrency",
        str(args.sessions),
        "--input-tokens",
        str(args.turn_tokens),
    ]
    shared = [
        "--shared-prefix-tokens",
        str(args.shared_tokens),
        "--prefix-groups",
        str(args.groups),
        "--concurrency",
        str(args.sessions),
        "--input-tokens",
        str(args.turn_tokens),
    ]
    all_in_flight = [
        "--turns",
        str(args.all_turns),
        "--concurrency",
        str(args.all_sessions),
        "--input-tokens",
        str(args.turn_tokens),
    ]
    workloads: list[tuple[str, list[str], dict[str, Any] | None]] = [
        ("turns", sessions, None),
        ("turns-prompt", sessions, {"header": None}),
        ("shared", shared, None),
        ("all-in-flight", all_in_flight, None),
    ]
    if args.workloads:
        wanted = set(args.workloads.split(","))
        workloads = [w for w in workloads if w[0] in wanted]
    fakes = [spawn_fake_server(fake_config(args)) for _ in range(args.instances)]
    rows: list[dict[str, Any]] = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for name, workload, affinity in workloads:
                for policy in POLICIES:
                    if affinity is not None and policy != "prefix_affinity":
                        continue  # least_in_flight ignores keys: the `turns` row is its figure
                    reset(fakes)
                    config = Path(tmp) / f"{name}-{policy}.yaml"
                    config.write_text(gateway_config([f.base_url for f in fakes], policy, affinity))
                    proc, url = spawn_gateway(config)
                    try:
                        # With --turns the bench counts sessions: the same number of requests either way.
                        n = args.requests // args.turns if name.startswith("turns") else args.requests
                        n = args.all_sessions if name == "all-in-flight" else n
                        summary = bench(url, workload, n, args, Path(tmp) / f"{name}-{policy}")
                        spread = admin_counts(url)
                    finally:
                        proc.terminate()
                        proc.wait(10)
                    rows.append(row(name, policy, summary, spread) | sessions_moved(fakes))
                    print_row(rows[-1])
    finally:
        for fake in fakes:
            fake.close()


def row(workload: str, policy: str, summary: dict[str, Any], spread: dict[str, Any]) -> dict[str, Any]:
    ttft = summary["metrics"]["ttft_ms"]
    cache = summary.get("cache") or {}
    return {
        "workload": workload,
        "policy": policy,
        "requests": summary["requests"].get("succeeded"),
        "errors": summary["requests"].get("failed"),
        "hit_rate": cache.get("hit_rate"),
        "ttft_mean_ms": ttft.get("mean"),
        "ttft_p50_ms": ttft.get("p50"),
        "ttft_p99_ms": ttft.get("p99"),
        "ttft_p50_by_turn_ms": [t["ttft_ms"].get("p50") for t in summary.get("by_turn") or []],
        "hit_rate_by_turn": [t.get("cache_hit_rate") for t in summary.get("by_turn") or []],
        "per_instance": spread["instances"],
        "reasons": spread["reasons"],
    }


def print_row(r: dict[str, Any]) -> None:
    def f(v: float | None, fmt: str) -> str:
        return "n/a" if v is None else format(v, fmt)

    print(
        f"{r['workload']:<13} {r['policy']:<16} ok={r['requests']!s:<5} err={r['errors']!s:<3} "
        f"hit_rate={f(r['hit_rate'], '.3f'):<6} ttft mean={f(r['ttft_mean_ms'], '.1f'):>6} p50={f(r['ttft_p50_ms'], '.1f'):>7} ms "
        f"p99={f(r['ttft_p99_ms'], '.1f'):>7} ms  per instance={r['per_instance']} {r['reasons']}",
        flush=True,
    )
    if r["workload"] == "all-in-flight":
        received = (
            f"{r['sessions_moved']}/{r['sessions']} = {f(r['moved_share'], '.3f')} (what the instances received)"
            if r["sessions"]
            else "n/a (the instances received no X-Session-ID)"
        )
        moves = r["reasons"].get("moved", 0) if r["policy"] == "prefix_affinity" else "n/a (no keys)"
        print(f"{'':<13} sessions moved: {received}; gateway moves: {moves}", flush=True)
    if r["ttft_p50_by_turn_ms"]:
        turns = ", ".join(
            f"{f(t, '.1f')} ms/{f(h, '.2f')}"
            for t, h in zip(r["ttft_p50_by_turn_ms"], r["hit_rate_by_turn"], strict=True)
        )
        print(f"{'':<13} by turn (TTFT p50/hit rate): {turns}", flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--instances", type=int, default=3)
    p.add_argument("--sessions", type=int, default=8, help="sessions (concurrency) at once")
    p.add_argument("--turns", type=int, default=6)
    p.add_argument("--requests", type=int, default=240, help="measured requests per run")
    p.add_argument("--turn-tokens", type=int, default=512, help="new user tokens per turn")
    p.add_argument("--shared-tokens", type=int, default=1024, help="shared system prompt length")
    p.add_argument("--groups", type=int, default=12, help="distinct shared system prompts")
    p.add_argument("--workloads", help="only these, comma-separated (turns, turns-prompt, shared, all-in-flight)")
    p.add_argument("--all-sessions", type=int, default=24, help="all-in-flight: sessions, all at once")
    p.add_argument("--all-turns", type=int, default=4, help="all-in-flight: turns per session")
    p.add_argument("--output-tokens", type=int, default=32)
    p.add_argument("--ttft-ms", type=float, default=10.0)
    p.add_argument("--itl-ms", type=float, default=2.0)
    p.add_argument("--prefill-ms", type=float, default=0.2, help="ms per uncached prompt token")
    p.add_argument(
        "--cache-blocks",
        type=int,
        default=640,
        help="prefix-cache capacity per instance, 16-token blocks (0: no limit)",
    )
    args = p.parse_args()
    print(
        f"{args.instances} fake instances, prefill {args.prefill_ms} ms/uncached token, TTFT floor {args.ttft_ms} ms, "
        f"cache {args.cache_blocks or 'unlimited'} x 16-token blocks each; "
        f"{args.sessions} at once, {args.requests} requests per run; turns={args.turns} x {args.turn_tokens} tokens, "
        f"shared={args.groups} x {args.shared_tokens} tokens",
        flush=True,
    )
    run(args)


if __name__ == "__main__":
    main()
