"""MLPerf's bounds table and LoadGen's settings: each row checked against the mlperf.conf that
MLCommons' LoadGen carries compiled in, and the one row where the rules and mlperf.conf disagree."""

from __future__ import annotations

import pytest
from tests.conftest import require_module

from tokenrace.errors import InvalidInput
from tokenrace.load.mlperf import (
    BOUNDS,
    MIN_DURATION_S,
    OFFLINE_SAMPLES,
    PERCENTILE,
    QSL_RNG_SEED,
    SAMPLE_INDEX_RNG_SEED,
    SCHEDULE_RNG_SEED,
    MlperfSpec,
    default_min_queries,
    loadgen_settings,
    resolve_bounds,
)

lg = require_module("mlperf_loadgen", "pip install 'tokenrace[mlperf]'")


def _conf_name(model: str, scenario: str) -> str:
    name = model.replace("llama3.1", "llama3_1")  # mlperf.conf's spelling
    return f"{name}-interactive" if scenario == "interactive" else name


@pytest.mark.parametrize("row", BOUNDS, ids=lambda b: f"{b.model}-{b.scenario}")
def test_each_row_matches_loadgens_mlperf_conf(row) -> None:  # type: ignore[no-untyped-def]
    s = lg.TestSettings()
    # conf_type 0: only the mlperf.conf compiled into LoadGen, no user.conf.
    assert s.FromConfig("", _conf_name(row.model, row.scenario), "Server", 0) == 0
    ttft = row.conf_ttft_ms if row.conf_ttft_ms is not None else row.ttft_ms
    tpot = row.conf_tpot_ms if row.conf_tpot_ms is not None else row.tpot_ms
    assert (s.ttft_latency, s.tpot_latency) == (int(ttft * 1e6), int(tpot * 1e6))
    assert s.use_token_latencies
    assert (s.qsl_rng_seed, s.sample_index_rng_seed, s.schedule_rng_seed) == (
        QSL_RNG_SEED,
        SAMPLE_INDEX_RNG_SEED,
        SCHEDULE_RNG_SEED,
    )
    assert row.source  # every row says where it comes from
    # What tokenrace sets for every LLM, as mlperf.conf does.
    ours = loadgen_settings(lg, MlperfSpec("server", ttft, tpot, target_qps=1))
    assert (s.server_target_latency_ns, s.server_target_latency_percentile) == (0, PERCENTILE)
    assert (ours.server_target_latency_ns, ours.server_target_latency_percentile) == (0, PERCENTILE)
    assert s.sample_concatenate_permutation and ours.sample_concatenate_permutation
    assert s.min_duration_ms == ours.min_duration_ms == MIN_DURATION_S * 1000


@pytest.mark.parametrize("model", [m for m in OFFLINE_SAMPLES if m != "gpt-oss-120b"])
def test_offline_sample_counts_match_mlperf_conf(model: str) -> None:
    s = lg.TestSettings()
    assert s.FromConfig("", _conf_name(model, "offline"), "Offline", 0) == 0
    assert s.min_query_count == OFFLINE_SAMPLES[model]


def test_rules_and_conf_disagree_so_none_is_picked() -> None:
    with pytest.raises(InvalidInput) as err:
        resolve_bounds("gpt-oss-120b", "interactive", None, None)
    assert err.value.param == "tpot"
    assert "20 ms" in err.value.problem and "15 ms" in err.value.problem
    assert resolve_bounds("gpt-oss-120b", "interactive", None, 15)[:2] == (2000, 15)
    assert resolve_bounds("gpt-oss-120b", "server", None, None)[:2] == (3000, 80)


def test_direct_bounds_win_and_offline_has_none() -> None:
    assert resolve_bounds("llama2-70b", "server", 1000, None)[:2] == (1000, 200)
    assert resolve_bounds(None, "server", 100, 10)[:2] == (100, 10)
    assert resolve_bounds("llama2-70b", "offline", None, None)[:2] == (None, None)
    with pytest.raises(InvalidInput):
        resolve_bounds(None, "server", 100, None)
    with pytest.raises(InvalidInput):
        resolve_bounds("mixtral-8x7b", "interactive", None, None)


def test_minimums_are_mlperfs_unless_shortened() -> None:
    assert MlperfSpec("server", 2000, 200, 1.0).comparable
    assert not MlperfSpec("server", 2000, 200, 1.0, min_duration_s=60).comparable
    assert default_min_queries("server", "llama2-70b", shortened=False) == 100
    assert default_min_queries("offline", "llama2-70b", shortened=False) == 24_576
    assert default_min_queries("offline", "deepseek-r1", shortened=False) == 4_388
    assert default_min_queries("offline", "llama2-70b", shortened=True) == 100


def test_settings_carry_the_bounds_in_ns() -> None:
    spec = MlperfSpec("interactive", 450, 40, target_qps=3, min_duration_s=60, min_queries=100)
    s = loadgen_settings(lg, spec)
    assert s.scenario == lg.TestScenario.Server  # interactive is the server scenario with tighter bounds
    assert (s.ttft_latency, s.tpot_latency, s.server_target_qps) == (450_000_000, 40_000_000, 3)
    assert (s.min_duration_ms, s.min_query_count) == (60_000, 100)
    peak = loadgen_settings(lg, MlperfSpec("server", 2000, 200, find_peak=True))
    assert peak.mode == lg.TestMode.FindPeakPerformance
    offline = loadgen_settings(lg, MlperfSpec("offline", target_qps=5))
    assert offline.scenario == lg.TestScenario.Offline and offline.offline_expected_qps == 5
