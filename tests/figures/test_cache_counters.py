"""The engines' own prefix-cache figures over a run, from two /metrics scrapes."""

from __future__ import annotations

from pathlib import Path

from tokenrace.figures.cache import counter_delta, server_cache

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "metrics"
VLLM = (FIXTURES / "vllm.txt").read_text()
SGLANG = (FIXTURES / "sglang.txt").read_text()


def earlier(text: str, name: str, value: float) -> str:
    """The same scrape with one counter set back to `value`, as it read before the run."""
    out = []
    for line in text.splitlines():
        if line.startswith(name + "{"):
            line = line.rsplit(" ", 1)[0] + f" {value}"
        out.append(line)
    return "\n".join(out) + "\n"


def test_vllm_hit_rate_is_the_delta_of_hits_over_queries() -> None:
    before = earlier(
        earlier(VLLM, "vllm:prefix_cache_queries_total", 1981300.0 - 10000),
        "vllm:prefix_cache_hits_total",
        297344.0 - 2500,
    )
    c = server_cache("vllm", before, VLLM)
    assert c is not None and c.queries == 10000 and c.hits == 2500 and c.hit_rate == 0.25
    assert "delta over the run" in c.source
    # Nothing queried during the run: no rate (undefined, not 0).
    idle = server_cache("vllm", VLLM, VLLM)
    assert idle is not None and idle.queries == 0 and idle.hit_rate is None


def test_sglang_gauge_and_engines_without_counters() -> None:
    c = server_cache("sglang", SGLANG, SGLANG)
    assert c is not None and abs(c.hit_rate - 0.113745) < 1e-6
    assert server_cache("vllm", SGLANG, SGLANG) is None  # the counters are not there
    assert server_cache("llamacpp", VLLM, VLLM) is None
    assert counter_delta("not prometheus {{{", "garbage", "vllm:prefix_cache_hits") is None
