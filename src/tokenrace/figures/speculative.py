"""Speculative decoding as the engine counts it: `speculative` in the summary.

vLLM (and llama.cpp) count drafts (verification steps with a draft), draft tokens proposed, draft
tokens accepted, and accepted tokens per draft position. Over the measured window the deltas of
two /metrics scrapes give:

- acceptance_rate = accepted ÷ draft tokens;
- mean_accepted_per_draft = accepted ÷ drafts, and tokens_per_step = 1 + that (the bonus token);
- per_position[i] = accepted at position i ÷ drafts (vLLM bench's per-position acceptance).

Each total is the sum of its exact sample name over label sets (data-parallel engines report
`engine="0"`, `"1"`, ...; label order does not matter). A counter's `_created` series and the
per-position family are different sample names, so neither is ever counted into a total: that
double count (epoch seconds plus per-position counts in "accepted") is a bug other tools shipped.

SGLang exposes only gauges, its own running averages (`spec_accept_rate`, `spec_accept_length`),
so its figures are read at the end of the run (`over: "end"`), not as a delta, averaged over ranks;
rows labelled `engine_type="draft"` (the draft model's own) are left out when the target's are there.
"""

from __future__ import annotations

from tokenrace.engines import SpecNames, engine
from tokenrace.model.sections import Speculative
from tokenrace.monitor.server import labeled_samples


def speculative_section(engine_name: str, before: str, after: str) -> Speculative | None:
    """The summary's `speculative`, or None when the engine reports no speculative decoding."""
    found = engine(engine_name)
    names = found.metrics.speculative if found is not None and found.metrics is not None else None
    if found is None or names is None:
        return None
    try:
        if names.draft_tokens is not None:
            return _from_counters(found.name, names, before, after)
        return _from_gauges(found.name, names, after)
    except ValueError:  # a scrape that does not parse: no figure, never a crash
        return None


def _from_counters(name: str, names: SpecNames, before: str, after: str) -> Speculative | None:
    assert names.drafts and names.draft_tokens and names.accepted_tokens
    totals = (names.drafts, names.draft_tokens, names.accepted_tokens)
    b, a = _totals(before, names), _totals(after, names)
    if a.get(names.draft_tokens) is None:
        return None  # the engine runs without speculative decoding
    deltas = {}
    for series in totals:
        now, then = a.get(series), b.get(series, 0.0)
        if now is None or then is None or now < then:  # a counter going backwards: the engine restarted
            return None
        deltas[series] = now - then
    drafts, draft_tokens, accepted = (deltas[s] for s in totals)
    if draft_tokens <= 0:
        return None  # counters present, but nothing was drafted in the window
    per_mean = accepted / drafts if drafts > 0 else None
    return Speculative(
        source=f"{name} /metrics {names.accepted_tokens} / {names.draft_tokens} (delta over the run)",
        over="window",
        drafts=drafts,
        draft_tokens=draft_tokens,
        accepted_tokens=accepted,
        acceptance_rate=accepted / draft_tokens,
        mean_accepted_per_draft=per_mean,
        tokens_per_step=None if per_mean is None else 1.0 + per_mean,
        per_position=_per_position(names, before, after, drafts),
    )


def _totals(text: str, names: SpecNames) -> dict[str, float]:
    """Each total counter summed over its label sets (engines); a missing one is absent."""
    wanted = [n for n in (names.drafts, names.draft_tokens, names.accepted_tokens) if n]
    out: dict[str, float] = {}
    for series, labels, value in labeled_samples(text, _spellings(wanted)):
        if "position" in labels:  # never a total, whatever the engine names it
            continue
        name = _catalog_name(series, wanted)
        out[name] = out.get(name, 0.0) + value
    return out


def _spellings(names: list[str]) -> frozenset[str]:
    """Each name with and without `_total`: prometheus-client's parser adds the suffix to a typed
    counter's samples (llama.cpp writes `llamacpp:spec_decode_num_drafts` under `# TYPE ... counter`)."""
    stems = [n.removesuffix("_total") for n in names]
    return frozenset(stems + [f"{s}_total" for s in stems])


def _catalog_name(series: str, names: list[str]) -> str:
    stem = series.removesuffix("_total")
    return next(n for n in names if n.removesuffix("_total") == stem)


def _per_position(names: SpecNames, before: str, after: str, drafts: float) -> list[float] | None:
    if names.accepted_per_position is None or drafts <= 0:
        return None

    def by_position(text: str) -> dict[int, float]:
        out: dict[int, float] = {}
        for _, labels, value in labeled_samples(text, _spellings([names.accepted_per_position or ""])):
            pos = labels.get("position")
            if pos is not None and pos.isdigit():
                out[int(pos)] = out.get(int(pos), 0.0) + value
        return out

    b, a = by_position(before), by_position(after)
    if not a:
        return None
    # A position the engine had not counted yet at the start (llama.cpp adds them lazily) began at 0.
    return [(a.get(i, 0.0) - b.get(i, 0.0)) / drafts for i in range(max(a) + 1)]


def _from_gauges(name: str, names: SpecNames, after: str) -> Speculative | None:
    wanted = frozenset(n for n in (names.rate_gauge, names.accept_length_gauge) if n)
    samples = labeled_samples(after, wanted)
    # SGLang may publish the draft model's own rows (engine_type="draft") beside the target's.
    target = [x for x in samples if x[1].get("engine_type") != "draft"] or samples
    values: dict[str, list[float]] = {}
    for series, _, value in target:
        values.setdefault(series, []).append(value)
    rate = _mean(values.get(names.rate_gauge or ""))
    length = _mean(values.get(names.accept_length_gauge or ""))
    if not rate and not length:  # absent, or SGLang's zeros when speculative decoding is off
        return None
    # SGLang's accept length counts the bonus token: tokens each verification step emits.
    return Speculative(
        source=f"{name} /metrics {', '.join(sorted(values))} (gauges at the end of the run, averaged over ranks)",
        over="end",
        acceptance_rate=rate,
        mean_accepted_per_draft=None if length is None else length - 1.0,
        tokens_per_step=length,
    )


def _mean(values: list[float] | None) -> float | None:
    return sum(values) / len(values) if values else None
