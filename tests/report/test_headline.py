"""The headline declaration on constructed summaries: what each figure says, and what is left out."""

from __future__ import annotations

from tokenrace.model.run import Knee, ProfileFile, StepRow, SweepFile
from tokenrace.model.sections import Energy, Speculative
from tokenrace.model.summary import Cost, GpuBasis, PoolingFigures, RequestCounts, Summary, Throughput
from tokenrace.report.headline import run_headline, sweep_headline, to_cards, to_lines


def test_an_embeddings_run_leads_with_inputs_per_second_not_output_tokens() -> None:
    summary = Summary(
        requests=RequestCounts(total=10, succeeded=9, failed=1),
        error_rate=0.1,
        errors_by_kind={"http_500": 1},
        throughput=Throughput(requests_per_s=4.0, window_s=2.5),
        pooling=PoolingFigures(api="embeddings", inputs_per_s=12.5, input_tokens_per_s=400.0, embedding_dim=576),
    )
    lines = to_lines(run_headline(summary))
    assert lines[:3] == ["TTFT p50: — · p95 —", "TPOT p50: — · p95 —", "E2E p95: — · p50 —"]  # never 0, never None
    assert (
        lines[3]
        == "throughput: 12.50 inputs/s · 400.0 input tok/s · 4.00 req/s over 2.50 s · vectors of 576 dimensions"
    )
    assert lines[4] == "requests: 9/10 ok · error rate 10.0 % · errors: http_500 x1"
    assert len(lines) == 5  # no cache, speculation, energy, content or cost: no line for them
    assert "None" not in to_cards(run_headline(summary))


def test_the_speed_of_light_and_a_cost_given_replace_what_the_run_saved() -> None:
    saved = Cost(basis="gpu", usd_per_million_output_tokens=9.0, gpu=GpuBasis(gpus=1, usd_per_gpu_hour=1.0))
    summary = Summary(throughput=Throughput(output_tokens_per_s=500.0, requests_per_s=2.0, window_s=10.0), cost=saved)
    given = saved.model_copy(update={"usd_per_million_output_tokens": 1.25})
    lines = to_lines(run_headline(summary, given, bound=2000.0))
    assert "25 % of speed of light" in lines[3]
    assert lines[-1].startswith("cost per million output tokens: $1.2500 · cost per 1k requests —")
    assert to_lines(run_headline(summary))[-1].startswith("cost per million output tokens: $9.0000")


def test_a_sweep_says_its_knee_and_the_knee_steps_cost() -> None:
    cost = Cost(basis="gpu", usd_per_million_output_tokens=1.5, gpu=GpuBasis(gpus=2, usd_per_gpu_hour=2.0))
    sweep = SweepFile(
        sweep="concurrency",
        stop_reason="saturated",
        knee=Knee(step="c4", concurrency=4, throughput_tokens_per_s=800.0, e2e_p95_ms=120.0, reason="gain < 10 %"),
        steps=[
            StepRow(step="c2", concurrency=2, throughput_tokens_per_s=500.0),
            StepRow(step="c4", concurrency=4, throughput_tokens_per_s=800.0, cost=cost),
            StepRow(step="c8", concurrency=8, throughput_tokens_per_s=820.0),
        ],
    )
    assert to_lines(sweep_headline(sweep)) == [
        "steps: 3 · stopped: saturated",
        "knee: c4 · concurrency 4 · 800.0 output tok/s · E2E p95 120.0 ms · gain < 10 %",
        "cost per million output tokens at the knee: $1.5000 · 2 GPU(s) at $2.00/GPU-hour at the measured throughput",
        "peak throughput: 820.0 output tok/s",
    ]
    no_knee = sweep.model_copy(update={"knee": None, "stop_reason": "completed"})
    assert to_lines(sweep_headline(no_knee))[1] == "knee: not reached · throughput still grew at the last step"


def test_a_profiles_peak_throughput_is_the_largest_figure_its_table_shows() -> None:
    # The profile's step table shows output tokens over each step's window; the headline must quote
    # that column, not the steady throughput a sweep compares (48.7 against the table's 48.9 once).
    profile = ProfileFile(
        steps=[
            StepRow(step="c2", concurrency=2, output_tokens_per_s=45.6, throughput_tokens_per_s=45.9),
            StepRow(step="c4", concurrency=4, output_tokens_per_s=48.9, throughput_tokens_per_s=48.7),
        ]
    )
    table = [row.output_tokens_per_s for row in profile.steps]
    assert to_lines(sweep_headline(profile))[-1] == f"peak throughput: {max(table):.1f} output tok/s"
    # it names the steps it ran (an embeddings profile runs one, not "cold, warm and concurrency steps")
    assert any(line.endswith("the fixed profile: c2, c4") for line in to_lines(sweep_headline(profile)))


def test_speculation_and_energy_read_their_units_and_digits_from_the_declarations() -> None:
    summary = Summary(
        speculative=Speculative(source="vllm", acceptance_rate=0.625, tokens_per_step=2.875),
        energy=Energy(
            source="nvml",
            method="counter",
            window_s=2.5,
            joules=1234.5,
            output_tokens_per_joule=0.4,
            mean_power_w=493.8,
        ),
    )
    lines = to_lines(run_headline(summary))
    assert "speculative decoding: 62.5 % · 2.88 tokens per step · accepted ÷ draft tokens (vllm)" in lines
    assert "energy: 0.40 output tok/J · 1,234.5 J over 2.50 s on 0 GPU(s) · mean 493.8 W · nvml, counter" in lines


def test_steps_too_small_to_bound_a_p95_say_so_with_the_count() -> None:
    few = [
        StepRow(step="c1", concurrency=1, requests=RequestCounts(total=10, succeeded=10), output_tokens_per_s=40.0),
        StepRow(step="c2", concurrency=2, requests=RequestCounts(total=8, succeeded=8), output_tokens_per_s=50.0),
    ]
    lines = to_lines(sweep_headline(ProfileFile(steps=few)))
    assert lines[-1] == (
        "tail percentiles: unbounded: steps of 8 to 10 requests · a p95 needs 59 requests, a p99 299, at 95 % confidence"
    )
    many = [r.model_copy(update={"requests": RequestCounts(total=60, succeeded=60)}) for r in few]
    assert not any(line.startswith("tail") for line in to_lines(sweep_headline(ProfileFile(steps=many))))
