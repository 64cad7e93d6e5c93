"""Rerank: score documents against a query; one body answers.

Two shapes: Cohere's, also Jina's and vLLM's (POST `{base}/rerank` with `query`, `documents`,
`top_n`; the answer's `results[]` hold `index` and `relevance_score`), and Hugging Face TEI's
(POST `/rerank` at the server's root with `query` and `texts`; the answer is a list of `index` and
`score`).
"""

from __future__ import annotations

from typing import Any

from tokenrace.client.apis.base import Api
from tokenrace.client.apis.embeddings import pooling_usage
from tokenrace.client.request import RequestSpec
from tokenrace.engines import server_root
from tokenrace.model.records import RequestRecord


def _documents(spec: RequestSpec) -> list[str]:
    return list(spec.prompt.documents or [])


class RerankApi(Api):
    """Cohere's shape (also Jina's and vLLM's)."""

    name = "rerank"
    path = "rerank"
    generates = False
    streams = False

    def body(self, spec: RequestSpec) -> dict[str, Any]:
        documents = _documents(spec)
        b: dict[str, Any] = {
            "model": spec.model,
            "query": spec.prompt.text or "",
            "documents": documents,
            "top_n": len(documents),
        }
        b.update(spec.options.extra_body)
        return b

    def read_body(self, rec: RequestRecord, raw: Any) -> None:
        if isinstance(raw, dict):
            rec.response_id = rec.response_id or raw.get("id")
            rec.usage = pooling_usage(raw.get("usage"))
            results = raw.get("results")
        else:
            results = raw  # TEI answers with the list itself
        if not isinstance(results, list):
            rec.fail("malformed_body", f"no list of results in the answer: {str(raw)[:120]!r}")
        elif not results:
            rec.fail("empty", "the response ranked no document")

    def not_found_hint(self, url: str) -> str | None:
        return (
            f"the server may not serve the rerank API at {url}: check the base URL; "
            "a Hugging Face TEI server takes the tei rerank format (POST /rerank)"
        )


class TeiRerankApi(RerankApi):
    """Hugging Face Text Embeddings Inference: `/rerank` at the server's root."""

    path = "rerank"

    def url(self, base_url: str) -> str:
        return f"{server_root(base_url)}/rerank"

    def body(self, spec: RequestSpec) -> dict[str, Any]:
        b: dict[str, Any] = {"query": spec.prompt.text or "", "texts": _documents(spec)}
        b.update(spec.options.extra_body)
        return b

    def not_found_hint(self, url: str) -> str | None:
        return (
            f"the server may not serve TEI's rerank API at {url}: check the base URL; "
            "a Cohere-, Jina- or vLLM-style server takes the cohere rerank format (POST /v1/rerank)"
        )
