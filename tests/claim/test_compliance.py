"""MLPerf's compliance tests as conditions of a claim (claim/compliance.py): each passes against an
honest fake server and fails against one that misbehaves the way the test catches, and the verdict
names the failure."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest
from pydantic import JsonValue

from tokenrace.claim import compliance
from tokenrace.claim.battery import Battery, ClaimSettings
from tokenrace.claim.models import ClaimFile, Condition
from tokenrace.client.openai import RequestOptions
from tokenrace.client.providers import ResolvedEndpoint
from tokenrace.fakes.fake_server import spawn_fake_server
from tokenrace.figures.objectives import Sample, parse_objectives
from tokenrace.model.records import RequestRecord
from tokenrace.runs.settings import BenchSettings

ASKED = 20
# 20 tokens at 10 ms apart: a request takes about 0.2 s, TPOT ~10 ms, steady enough on a loaded machine
HONEST = {"ttft_ms": 10, "itl_ms": 10, "output_tokens": 8}


def compliance_claim(server: dict[str, Any], out: Path, ignore_eos: bool = True) -> ClaimFile:
    """The battery's baseline and its TEST04 run against a fake server, then the answers judged and
    the verdict decided (the other parts are not needed for these checks)."""
    with spawn_fake_server(server) as srv:
        extra: dict[str, JsonValue] = {"ignore_eos": True} if ignore_eos else {}
        template = BenchSettings(
            endpoint=ResolvedEndpoint(srv.url + "/v1", None, None, "fake"),
            request=RequestOptions(max_tokens=ASKED, extra_body=extra),
            output=out,
        )
        cs = ClaimSettings(template, parse_objectives("ttft_p50<=2s", "expect"), 120.0)
        battery = Battery(cs)

        async def go() -> None:
            battery.directory.mkdir(parents=True)
            battery.started_ns = time.perf_counter_ns()
            assert await battery._warm()
            assert await battery._repeated()
            battery._finish()

        asyncio.run(go())
    return battery.claim


def check_of(claim: ClaimFile, value: str) -> Condition:
    return next(c for c in claim.conditions if c.dimension == "compliance" and c.value == value)


def test_an_honest_server_passes_every_compliance_check(tmp_path: Path) -> None:
    # A prefix cache legitimately shortens a repeated prompt's prefill (TTFT ~60 ms uncached, ~10 ms
    # cached): TEST04 judges the decode, so the cache is no accusation.
    claim = compliance_claim({**HONEST, "prefix_cache": True, "prefill_ms_per_token": 0.5}, tmp_path / "c")
    tokens = check_of(claim, compliance.TOKEN_COUNT)
    assert tokens.outcome == "held", tokens.note
    figures = tokens.figures["compliance"]
    assert figures.disagreeing == 0 and figures.answers is not None and figures.answers >= 20
    assert figures.reported_tokens_mean == figures.streamed_tokens_mean == ASKED
    assert check_of(claim, compliance.FINISHES).outcome == "held"
    length = check_of(claim, compliance.OUTPUT_LENGTH)
    assert length.outcome == "held" and length.figures["compliance"].length_ratio == 1.0, length.note
    # A fake whose decode speed does not depend on the prompt: never a certain speed-up (held, or
    # undecided when the loaded machine spreads TPOT past the 10 % either side).
    repeated = check_of(claim, compliance.REPEATED_PROMPT)
    assert repeated.outcome != "failed", repeated.note
    speedup_ttft = repeated.figures["compliance"].speedup_ttft_p50
    assert speedup_ttft is not None and speedup_ttft > 1.5, repeated.note
    assert repeated.runs and (tmp_path / "c" / repeated.runs[0] / "records.jsonl").exists()
    # one factor at a time: the repeated prompt has the baseline's length
    warm = next(c for c in claim.conditions if c.dimension == "warm")
    mine, theirs = repeated.figures.get("prompt_tokens_mean"), warm.figures.get("prompt_tokens_mean")
    assert mine and theirs and abs(mine - theirs) <= 0.25 * max(mine, theirs), (mine, theirs)
    assert claim.verdict == "holds", claim.sentence


def test_misreported_token_counts_fail_the_claim(tmp_path: Path) -> None:
    # usage reports twice the tokens streamed: tokens per second would read twice as fast
    claim = compliance_claim({**HONEST, "usage_output_scale": 2.0}, tmp_path / "c")
    tokens = check_of(claim, compliance.TOKEN_COUNT)
    assert tokens.outcome == "failed", tokens.note
    assert tokens.figures["compliance"].reported_tokens_mean == 2 * ASKED
    assert tokens.figures["compliance"].streamed_tokens_mean == ASKED
    assert claim.verdict == "fails" and "misreports its output tokens (test06)" in (claim.sentence or "").lower()


def test_two_finishes_fail_the_claim(tmp_path: Path) -> None:
    claim = compliance_claim({**HONEST, "finishes": 2}, tmp_path / "c")
    ends = check_of(claim, compliance.FINISHES)
    assert ends.outcome == "failed" and ends.figures["compliance"].finishes_max == 2, ends.note
    assert claim.verdict == "fails" and "more than once (test06)" in (claim.sentence or "").lower()


def test_stopping_early_despite_ignore_eos_leaves_the_claim_unproven(tmp_path: Path) -> None:
    claim = compliance_claim({**HONEST, "honours_ignore_eos": False}, tmp_path / "c")
    length = check_of(claim, compliance.OUTPUT_LENGTH)
    assert length.outcome == "failed" and length.figures["compliance"].length_ratio == pytest.approx(8 / ASKED)
    assert claim.verdict == "unproven" and "outputs shorter than asked (test09)" in (claim.sentence or "").lower()


def test_a_server_that_caches_answers_fails_the_claim(tmp_path: Path) -> None:
    # a prompt seen before is answered 4 times faster: the speed-up is far past 10 %
    claim = compliance_claim({**HONEST, "repeat_speedup": 4.0}, tmp_path / "c", ignore_eos=False)
    repeated = check_of(claim, compliance.REPEATED_PROMPT)
    assert repeated.outcome == "failed", repeated.note
    speedup = repeated.figures["compliance"].speedup_tpot_p50
    assert speedup is not None and speedup > 2
    assert check_of(claim, compliance.OUTPUT_LENGTH).skipped  # TEST09 needs --ignore-eos
    assert claim.verdict == "fails" and "(TEST04)" in (claim.sentence or "")


def line(**fields: Any) -> RequestRecord:
    base = {"seq": 0, "output_tokens": 20, "output_tokens_source": "usage", "streamed_tokens": 20}
    return RequestRecord.model_validate({**base, "streamed_tokens_source": "chunks", **fields})


def test_token_counts_are_judged_within_what_chunks_and_tokenizers_can_tell() -> None:
    assert compliance.disagrees(line()) is False
    assert compliance.disagrees(line(output_tokens=21)) is False  # the end-of-sequence token, never streamed
    assert compliance.disagrees(line(output_tokens=19)) is True  # fewer reported than events streamed
    # more reported than events: several tokens to an event, or inflation; chunks cannot tell
    assert compliance.disagrees(line(output_tokens=40)) is None
    assert compliance.disagrees(line(output_tokens=40, streamed_tokens_source="tokenizer")) is True
    assert compliance.disagrees(line(output_tokens=21, streamed_tokens_source="tokenizer")) is False
    assert compliance.disagrees(line(output_tokens_source="tokenizer")) is None  # no usage: nothing to check
    undecided = compliance.token_count([line(output_tokens=40)] * 20, 0.95)
    assert undecided.outcome == "unproven" and undecided.figures["compliance"].undecidable == 20
    # One stray answer among 40 is no proof of misreporting; 40 of 40 is.
    assert compliance.token_count([line()] * 39 + [line(output_tokens=5)], 0.95).outcome == "unproven"
    assert compliance.token_count([line(output_tokens=5)] * 40, 0.95).outcome == "failed"
    assert compliance.token_count([line()] * 9, 0.95).outcome == "unproven"  # too few answers to hold


def compliance_condition(value: str, outcome: str, ratio: float | None = None) -> Condition:
    figures = {"compliance": {"length_ratio": ratio}}
    return Condition.model_validate(
        {"dimension": "compliance", "value": value, "held": outcome != "failed", "outcome": outcome, "figures": figures}
        | {"note": f"{value} note"}
    )


def test_the_verdict_after_the_compliance_conditions() -> None:
    from tests.claim.test_verdict import claim, warm  # noqa: PLC0415 - the verdict tests' builders

    assert claim(warm(), compliance_condition(compliance.TOKEN_COUNT, "held")).verdict == "holds"
    undecided = claim(warm(), compliance_condition(compliance.REPEATED_PROMPT, "unproven"))
    assert undecided.verdict == "holds" and any("repeated_prompt note" in r for r in undecided.reasons)
    for untrustworthy in (compliance.TOKEN_COUNT, compliance.FINISHES, compliance.REPEATED_PROMPT):
        c = claim(warm(), compliance_condition(untrustworthy, "failed"))
        assert c.verdict == "fails" and c.restrictions == [], c.sentence
        assert c.reasons[0].endswith(f"{untrustworthy} note")
    short = claim(warm(), compliance_condition(compliance.OUTPUT_LENGTH, "failed", ratio=0.4))
    assert short.verdict == "unproven" and "Outputs shorter than asked (TEST09)" in (short.sentence or "")
    # a claim that failed on speed still fails; the short outputs are added to its reasons
    failed = claim(warm("failed"), compliance_condition(compliance.OUTPUT_LENGTH, "failed", ratio=0.4))
    assert failed.verdict == "fails" and "outputs shorter than asked" in failed.reasons[0]


def test_a_decode_too_quick_to_time_decides_nothing() -> None:
    # 1 ms a token: two chunks often share one socket read, so one side's TPOT reads 0.1 ms by chance.
    distinct = Sample(tpot_ms=[1.0] * 40, measured=40)
    repeated = Sample(tpot_ms=[0.14] * 20, measured=20)
    c = compliance.repeated_prompt(repeated, distinct, 0.95)
    assert c.outcome == "unproven" and "too quick to time" in (c.note or "")
