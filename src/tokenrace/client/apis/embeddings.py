"""OpenAI Embeddings API: POST `/embeddings` with a batch of `input` texts; one body answers.

The answer's `data[]` holds one vector per input (`embedding`: floats, or base64 of float32 when the
request asked for `encoding_format: base64`); `usage.prompt_tokens` counts the inputs' tokens.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

from tokenrace.client.apis.base import Api, body_object, count
from tokenrace.client.request import RequestSpec
from tokenrace.model.records import RequestRecord, Usage


class EmbeddingsApi(Api):
    name = "embeddings"
    path = "embeddings"
    generates = False
    streams = False

    def body(self, spec: RequestSpec) -> dict[str, Any]:
        inputs = spec.prompt.inputs if spec.prompt.inputs is not None else [spec.prompt.as_text()]
        b: dict[str, Any] = {"model": spec.model, "input": list(inputs)}
        b.update(spec.options.extra_body)
        return b

    def read_body(self, rec: RequestRecord, raw: Any) -> None:
        obj = body_object(rec, raw)
        if obj is None:
            return
        rec.response_id = rec.response_id or obj.get("id")
        rec.usage = pooling_usage(obj.get("usage"))
        data = [d for d in obj.get("data") or [] if isinstance(d, dict)]
        if not data:
            rec.fail("empty", "the response carried no embedding")
            return
        rec.embedding_dim = dimension(data[0].get("embedding"))
        if rec.inputs is not None and len(data) < rec.inputs:
            rec.fail("incomplete", f"{len(data)} embeddings for {rec.inputs} inputs")


def dimension(vector: Any) -> int | None:
    """Length of one embedding: a list of floats, or base64 of little-endian float32."""
    if isinstance(vector, list):
        return len(vector)
    if isinstance(vector, str):
        try:
            return len(base64.b64decode(vector, validate=True)) // 4
        except (binascii.Error, ValueError):
            return None
    return None


def pooling_usage(usage: Any) -> Usage | None:
    """Usage of an embeddings or rerank answer. Nothing is generated there, so when only
    `total_tokens` is given (Jina, some vLLM versions), it is the input's count."""
    if not isinstance(usage, dict):
        return None
    prompt, total = count(usage.get("prompt_tokens")), count(usage.get("total_tokens"))
    if prompt is None:
        prompt = total
    out: Usage = {}
    if prompt is not None:
        out["prompt_tokens"] = prompt
    if total is not None:
        out["total_tokens"] = total
    return out
