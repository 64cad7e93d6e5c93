"""The fake server's speculative-decoding page, DCGM exporter page and content-dependent speed."""

from __future__ import annotations

import time
import urllib.error
import urllib.request

import pytest
from pydantic import ValidationError

from tokenrace.fakes.fake_config import FakeConfig
from tokenrace.fakes.fake_server import FakeServerThread
from tokenrace.monitor.energy import parse_dcgm
from tokenrace.monitor.server import labeled_samples


def get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as r:
        return str(r.read().decode())


def test_a_content_rule_with_an_unknown_setting_is_refused() -> None:
    with pytest.raises(ValidationError, match="itl"):
        FakeConfig(when_prompt_contains={"verbatim": {"itl": 1}})


def test_the_spec_page_carries_the_traps() -> None:
    with FakeServerThread({"spec_tokens": 4, "spec_engines": 2}) as srv:
        text = get(f"{srv.url}/metrics")
    assert 'vllm:spec_decode_num_drafts_created{engine="0",model_name="fake-model"}' in text
    assert 'vllm:spec_decode_num_drafts_total{model_name="fake-model",engine="1"}' in text  # the other order
    positions = labeled_samples(text, frozenset({"vllm:spec_decode_num_accepted_tokens_per_pos_total"}))
    assert sorted({labels["position"] for _, labels, _ in positions}) == ["0", "1", "2", "3"]


def test_the_dcgm_page_grows_at_the_programmed_power() -> None:
    with FakeServerThread({"dcgm_power_w": [300.0, 150.0]}) as srv:
        first, t0 = parse_dcgm(get(f"{srv.url}/dcgm/metrics")), time.monotonic()
        time.sleep(0.3)  # the window the counter integrates over, not a wait for something
        second, t1 = parse_dcgm(get(f"{srv.url}/dcgm/metrics")), time.monotonic()
    for a, b, watts in zip(first, second, (300.0, 150.0), strict=True):
        assert a.power_w == watts and a.energy_mj is not None and b.energy_mj is not None
        assert (b.energy_mj - a.energy_mj) / 1000 == pytest.approx(watts * (t1 - t0), rel=0.05)


def test_no_dcgm_page_unless_programmed() -> None:
    with FakeServerThread({}) as srv, pytest.raises(urllib.error.HTTPError):
        get(f"{srv.url}/dcgm/metrics")
