"""--slo speaks the objectives' grammar: per-request ceilings, the old `ttft=500ms` spelling kept."""

from __future__ import annotations

import pytest

from tokenrace.errors import InvalidInput
from tokenrace.figures.slo import parse_slo, slo_limits


def test_old_and_new_spellings_read_alike() -> None:
    old = parse_slo("ttft=500ms,tpot=50ms,e2e=10s,itl=0.2s")
    new = parse_slo("ttft<=500ms, tpot<=50, e2e<=10s, itl<=200ms")
    assert old is not None and new is not None
    assert slo_limits(old) == slo_limits(new) == {"ttft_ms": 500, "tpot_ms": 50, "e2e_ms": 10000, "itl_ms": 200}
    assert [(o.figure, o.stat, o.op) for o in old] == [(f, None, "<=") for f in ("ttft", "tpot", "e2e", "itl")]
    assert slo_limits(parse_slo("ttft=250us") or ()) == {"ttft_ms": 0.25}
    assert parse_slo(None) is None and parse_slo("") is None


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("speed=fast", "a ceiling on one request's ttft, tpot, e2e or itl"),
        ("ttft=soon", "a ceiling, written ttft<=LIMIT (e.g. ttft<=500ms)"),
        ("ttft<=1e400ms", "the limit must be a number of 0 or more"),
        ("ttft_p99<=500ms", "a ceiling on one request's"),  # a statistic is for --sla
        ("output_tok_s_per_user>=150", "a ceiling on one request's"),
        ("ttft>=100ms", "an SLO is a ceiling, written ttft<=LIMIT"),
        ("ttft<=5tok/s", "the unit 'tok/s' does not fit ttft"),
        ("ttft<=500ms,ttft=1s", "ttft has more than one limit"),
        (",", "give at least one SLO"),
    ],
)
def test_bad_slos_are_one_line_errors(text: str, message: str) -> None:
    with pytest.raises(InvalidInput, match="slo") as err:
        parse_slo(text)
    assert message in str(err.value) and "\n" not in str(err.value)
