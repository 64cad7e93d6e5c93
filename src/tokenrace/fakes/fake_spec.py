"""Speculative decoding for the fake server, counted the way vLLM counts it on /metrics.

Each decoding step of a request proposes `k` draft tokens; each is accepted with probability `p`
until the first rejection, and the step emits the accepted tokens plus one (the bonus token), so a
request of n output tokens takes about n ÷ (1 + accepted per step) steps. The counters are vLLM's:
drafts, draft tokens, accepted tokens and accepted tokens per position, per engine.

The page carries the traps a careless reader falls into: every counter has a `_created` series
(epoch seconds), the per-position family shares the accepted counter's stem, two engines report
with their labels in different orders, and the counters start from earlier traffic, so only
deltas are right. Pure: no I/O, no clock.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

CREATED = 1.7567367987e9  # a fixed epoch second for the `_created` series
_PRIOR = (1000.0, 3000.0, 2100.0)  # drafts, draft tokens, accepted already counted when the server "started"


@dataclass
class EngineCounts:
    drafts: float = _PRIOR[0]
    draft_tokens: float = _PRIOR[1]
    accepted: float = _PRIOR[2]
    per_position: dict[int, float] = field(default_factory=dict)


@dataclass
class SpecCounters:
    engines: dict[int, EngineCounts] = field(default_factory=dict)

    def generate(self, output_tokens: int, k: int, p: float, rng: random.Random, engine: int) -> None:
        """Count the steps that generate `output_tokens` tokens with `k` draft tokens per step."""
        counts = self.engines.setdefault(engine, EngineCounts())
        produced = 0
        while produced < output_tokens:
            accepted = 0
            while accepted < k and rng.random() < p:
                counts.per_position[accepted] = counts.per_position.get(accepted, 0.0) + 1.0
                accepted += 1
            counts.drafts += 1
            counts.draft_tokens += k
            counts.accepted += accepted
            produced += accepted + 1

    def totals(self, engines: int = 1) -> tuple[float, float, float]:
        """(drafts, draft tokens, accepted) over all engines: what a reader should sum."""
        self._ensure(engines)
        e = self.engines.values()
        return sum(c.drafts for c in e), sum(c.draft_tokens for c in e), sum(c.accepted for c in e)

    def _ensure(self, engines: int) -> None:
        for i in range(engines):
            self.engines.setdefault(i, EngineCounts())

    def metrics_text(self, model: str, k: int, engines: int) -> str:
        self._ensure(engines)
        lines: list[str] = []
        for stem, attr, help_text in (
            ("num_drafts", "drafts", "Number of spec decoding drafts."),
            ("num_draft_tokens", "draft_tokens", "Number of draft tokens."),
            ("num_accepted_tokens", "accepted", "Number of accepted tokens."),
        ):
            name = f"vllm:spec_decode_{stem}"
            lines += [f"# HELP {name}_total {help_text}", f"# TYPE {name}_total counter"]
            for i, counts in sorted(self.engines.items()):
                lines.append(f"{name}_total{{{_labels(i, model)}}} {getattr(counts, attr)}")
                lines.append(f"{name}_created{{{_labels(i, model)}}} {CREATED}")
        name = "vllm:spec_decode_num_accepted_tokens_per_pos"
        lines += [f"# HELP {name}_total Accepted tokens per draft position.", f"# TYPE {name}_total counter"]
        for i, counts in sorted(self.engines.items()):
            for pos in range(k):
                labels = f'{_labels(i, model)},position="{pos}"'
                lines.append(f"{name}_total{{{labels}}} {counts.per_position.get(pos, 0.0)}")
                lines.append(f"{name}_created{{{labels}}} {CREATED}")
        return "\n".join(lines) + "\n"


def _labels(engine: int, model: str) -> str:
    # Odd engines put model_name first: a reader must not depend on label order.
    if engine % 2:
        return f'model_name="{model}",engine="{engine}"'
    return f'engine="{engine}",model_name="{model}"'
