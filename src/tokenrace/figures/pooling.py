"""Figures of embeddings and rerank runs, and why a streamed figure has no value in a run.

An embeddings or rerank request answers its whole batch in one body: its latency is `e2e_ms`, and
its work is the inputs (documents) it carried and their tokens. Defined in docs/metrics.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from tokenrace.client.request import POOLING_APIS
from tokenrace.model.metrics import STREAMED
from tokenrace.model.records import RequestRecord
from tokenrace.model.stats import Stats
from tokenrace.model.summary import PoolingFigures
from tokenrace.stats import describe


def pooling_figures(api: str, ok: Sequence[RequestRecord], window_s: float | None) -> PoolingFigures | None:
    """Inputs (documents) and input tokens per second over the measured window; None for other APIs."""
    if api not in POOLING_APIS:
        return None
    kind: Literal["embeddings", "rerank"] = "embeddings" if api == "embeddings" else "rerank"
    items = [r.inputs if api == "embeddings" else r.documents for r in ok]
    counted = [n for n in items if n is not None]
    tokens = [r.prompt_tokens for r in ok if r.prompt_tokens is not None]
    dims = {r.embedding_dim for r in ok if r.embedding_dim is not None}

    def per_s(total: float, known: bool) -> float | None:
        return round(total / window_s, 4) if window_s and known else None

    rate = per_s(sum(counted), bool(counted))
    return PoolingFigures(
        api=kind,
        inputs_per_s=rate if api == "embeddings" else None,
        documents_per_s=rate if api == "rerank" else None,
        # Tokens per second only when every succeeded request's count is known: a partial sum would read low.
        input_tokens_per_s=per_s(sum(tokens), bool(ok) and len(tokens) == len(ok)),
        per_request=Stats.model_validate(describe(counted)),
        embedding_dim=dims.pop() if len(dims) == 1 else None,
        embedding_dims=sorted(dims) if len(dims) > 1 else None,
    )


def not_measured(api: str, stream: bool) -> dict[str, str]:
    """metric -> why it is null in this run, for the streamed figures a run cannot have."""
    if api in POOLING_APIS:
        why = f"the {api} API answers in one body: there is no first token and no token stream to time"
    elif not stream:
        why = "the answers were not streamed (no-stream): only the end of each body is observed"
    else:
        return {}
    return dict.fromkeys(STREAMED, why)
