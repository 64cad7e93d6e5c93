"""Embeddings and rerank wire shapes for the fake server: requests read, answers made. Pure (no I/O).

Vectors and scores are deterministic for a seed and a request, so a test can check exact bytes.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias

from tokenrace.fakes.fake_openai import Json, count_tokens

PoolingKind: TypeAlias = Literal["embeddings", "rerank", "tei_rerank"]


class PoolingBadRequest(ValueError):
    """The body is not a request of this API (answered with 400)."""


@dataclass(frozen=True)
class PoolingRequest:
    """What one embeddings or rerank request asks for."""

    kind: PoolingKind
    model: str | None
    texts: tuple[str, ...]  # the inputs to embed, or the documents to rank
    query: str = ""
    top_n: int | None = None

    @property
    def items(self) -> int:
        return len(self.texts)

    @property
    def tokens(self) -> int:
        return sum(count_tokens(t) for t in self.texts) + count_tokens(self.query)


def read_pooling(kind: PoolingKind, body: Mapping[str, Any]) -> PoolingRequest:
    """Raises PoolingBadRequest with the message a server would send."""
    model = body.get("model") if isinstance(body.get("model"), str) else None
    if kind == "embeddings":
        inputs = body.get("input")
        if isinstance(inputs, str):
            inputs = [inputs]
        if not isinstance(inputs, list) or not inputs or not all(isinstance(t, str) for t in inputs):
            raise PoolingBadRequest("`input` must be a string or a non-empty list of strings.")
        return PoolingRequest(kind, model, tuple(inputs))
    field = "texts" if kind == "tei_rerank" else "documents"
    texts = body.get(field)
    query = body.get("query")
    if not isinstance(query, str) or not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
        raise PoolingBadRequest(f"`query` (a string) and `{field}` (a list of strings) are required.")
    top_n = body.get("top_n") if isinstance(body.get("top_n"), int) else None
    return PoolingRequest(kind, model, tuple(texts), query, top_n)


def pooling_answer(req: PoolingRequest, request_id: str, model: str, dim: int, rng: random.Random) -> Any:
    """The answer's JSON: an OpenAI embeddings list, a Cohere-shaped rerank object or TEI's list."""
    usage = {"prompt_tokens": req.tokens, "total_tokens": req.tokens}
    if req.kind == "embeddings":
        data = [
            {"object": "embedding", "index": i, "embedding": [round(rng.uniform(-1, 1), 6) for _ in range(dim)]}
            for i in range(req.items)
        ]
        return {"object": "list", "data": data, "model": model, "usage": usage}
    scores = sorted(((rng.random(), i) for i in range(req.items)), reverse=True)
    if req.kind == "tei_rerank":
        return [{"index": i, "score": round(s, 6)} for s, i in scores]
    top = scores[: req.top_n] if req.top_n is not None else scores
    results: list[Json] = [
        {"index": i, "relevance_score": round(s, 6), "document": {"text": req.texts[i]}} for s, i in top
    ]
    return {"id": request_id, "model": model, "results": results, "usage": usage}
