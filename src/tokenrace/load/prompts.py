"""Prompt sets: built-in, one text, a JSONL file, or synthetic prompts sized in tokens."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from tokenrace.client.conversation import chat_messages
from tokenrace.client.images import Image
from tokenrace.client.openai import Prompt
from tokenrace.errors import InvalidInput
from tokenrace.load.tokens import Tokenizer
from tokenrace.load.workloads.images import attach, read_file, tally_messages

BUILTIN: tuple[str, ...] = (
    "Explain in three sentences why the decode phase of LLM inference is usually memory-bound.",
    "Write a short Python function that returns the n-th Fibonacci number iteratively, with a docstring.",
    "Summarise the plot of Romeo and Juliet for a ten-year-old in one paragraph.",
    "List five practical tips for reducing the latency of a web API, one line each.",
    "Translate into French: 'The quick brown fox jumps over the lazy dog near the river bank.'",
    "What is the difference between a process and a thread? Answer briefly.",
    "Draft a polite email asking a colleague to review a pull request by Friday.",
    "Give a recipe for a simple tomato soup with quantities for two people.",
    "用三句话解释什么是首字延迟（TTFT），以及它为什么影响聊天体验。",
    "请列出部署大模型推理服务时最常见的五个显存问题，并各用一句话说明原因。",
    "把下面这句话改写得更正式：我们明天把新模型上线，先放百分之五的流量看看。",
    "写一首关于秋天的四行短诗。",
)

_WORDS = (
    "the model reads every weight once per token so memory bandwidth sets the pace while compute waits "
    "a request arrives the server batches it with others and streams tokens back as soon as they exist "
    "latency throughput cost queue cache prefill decode batch stream token context window server client"
).split()


@dataclass(frozen=True, slots=True)
class PromptSet:
    prompts: tuple[Prompt, ...]
    name: str  # what the manifest records: builtin, text, file path, synthetic spec
    sizing: str | None = None  # "exact" | "approximate" for synthetic prompts

    def pick(self, seq: int) -> Prompt:
        return self.prompts[seq % len(self.prompts)]


def builtin() -> PromptSet:
    return PromptSet(tuple(Prompt(text=t) for t in BUILTIN), "builtin")


def single(text: str) -> PromptSet:
    if not text.strip():
        raise InvalidInput("prompt", "is empty")
    return PromptSet((Prompt(text=text),), "text")


def from_jsonl(path: str | Path) -> PromptSet:
    p = Path(path)
    try:
        lines = p.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise InvalidInput("prompts", f"cannot read {p}: {exc.strerror}") from None
    prompts = [_parse_line(line, p, i) for i, line in enumerate(lines, 1) if line.strip()]
    if not prompts:
        raise InvalidInput("prompts", f"{p} has no prompts")
    return PromptSet(tuple(prompts), str(p))


def _parse_line(line: str, path: Path, lineno: int) -> Prompt:
    where = f"{path}:{lineno}"
    try:
        obj: Any = orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        raise InvalidInput("prompts", f"{where}: not JSON ({exc})") from None
    if isinstance(obj, str):
        return Prompt(text=obj)
    if not isinstance(obj, dict):
        raise InvalidInput("prompts", f"{where}: expected an object with 'messages' or 'prompt'")
    max_tokens = obj.get("max_tokens")
    if max_tokens is not None and (not isinstance(max_tokens, int) or max_tokens < 1):
        raise InvalidInput("prompts", f"{where}: max_tokens must be a positive integer")
    if isinstance(obj.get("messages"), list):
        try:
            messages = chat_messages(obj["messages"])
        except ValueError as exc:
            raise InvalidInput("prompts", f"{where}: {exc}") from None
        images = tally_messages(messages, "prompts", where)
        prompt = Prompt(messages=messages, max_tokens=max_tokens, images=images)
    elif isinstance(obj.get("prompt", obj.get("text")), str):
        prompt = Prompt(text=obj.get("prompt", obj.get("text")), max_tokens=max_tokens)
    else:
        raise InvalidInput("prompts", f"{where}: expected 'messages' (a list) or 'prompt' (a string)")
    return attach(prompt, _line_images(obj.get("image"), path, where))


def _line_images(value: Any, path: Path, where: str) -> list[Image]:
    """A ShareGPT-4V-style `image` field: a path or a list of paths, relative to the file's folder."""
    if value is None:
        return []
    paths = value if isinstance(value, list) else [value]
    if not all(isinstance(v, str) and v for v in paths):
        raise InvalidInput("prompts", f"{where}: 'image' must be a file path or a list of paths")
    return [read_file(path.parent / v, "prompts") for v in paths]


def draw_lengths(mean: int, std: float, n: int, seed: int | None) -> list[int]:
    rng = np.random.default_rng(seed)
    if std <= 0:
        return [max(1, int(mean))] * n
    return [max(1, int(round(x))) for x in rng.normal(mean, std, n)]


async def synthetic(
    input_tokens: tuple[int, float],
    tokenizer: Tokenizer | None,
    n: int = 64,
    seed: int | None = 0,
    output_tokens: Sequence[int] | None = None,
) -> PromptSet:
    """`n` prompts of about `input_tokens` tokens; exact when a tokenizer is available."""
    lengths = draw_lengths(int(input_tokens[0]), input_tokens[1], n, seed)
    rng = np.random.default_rng(seed)
    prompts = []
    for i, length in enumerate(lengths):
        try:
            text = await _sized_text(length, rng, tokenizer)
        except Exception:  # noqa: BLE001 - e.g. a server with /tokenize but no /detokenize
            tokenizer = None
            text = await _sized_text(length, rng, None)
        max_tokens = output_tokens[i % len(output_tokens)] if output_tokens else None
        prompts.append(Prompt(text=text, max_tokens=max_tokens, label=f"in={length}"))
    sizing = "exact" if tokenizer is not None else "approximate"
    return PromptSet(tuple(prompts), f"synthetic(input_tokens={input_tokens[0]},std={input_tokens[1]})", sizing)


async def _sized_text(tokens: int, rng: np.random.Generator, tokenizer: Tokenizer | None) -> str:
    # A unique prefix defeats prefix caching between requests, as real traffic would.
    prefix = f"[{int(rng.integers(10**9))}] "
    words = [str(w) for w in rng.choice(_WORDS, size=tokens * 2 + 8)]
    text = prefix + " ".join(words)
    if tokenizer is None:
        # About 0.75 words per token for English prose: approximate, and said so in the manifest.
        return prefix + " ".join(words[: max(1, int(tokens * 0.75))])
    ids = (await tokenizer.encode(text))[:tokens]
    out = await tokenizer.decode(ids)
    # Decoding and re-encoding can merge differently at the cut; trim until the count fits.
    while out and len(await tokenizer.encode(out)) > tokens:
        out = out[:-1]
    return out


DEFAULT_DOCUMENTS = 10  # rerank: documents per request when the run does not say


def embedding_batches(texts: PromptSet, batch_size: int, count: int) -> PromptSet:
    """`count` embeddings requests of `batch_size` inputs each, drawn in order from `texts`."""
    pool = [p.as_text() for p in texts.prompts]
    prompts = tuple(
        Prompt(inputs=[pool[(i * batch_size + j) % len(pool)] for j in range(batch_size)], label=f"inputs={batch_size}")
        for i in range(count)
    )
    return PromptSet(prompts, f"embeddings({batch_size} inputs per request over {texts.name})", texts.sizing)


def rerank_sets(queries: PromptSet, documents: PromptSet, per_request: int, count: int) -> PromptSet:
    """`count` rerank requests: a query from `queries` and `per_request` documents from `documents`."""
    qs = [p.as_text() for p in queries.prompts]
    pool = [p.as_text() for p in documents.prompts]
    prompts = tuple(
        Prompt(
            text=qs[i % len(qs)],
            documents=[pool[(i * per_request + j) % len(pool)] for j in range(per_request)],
            label=f"documents={per_request}",
        )
        for i in range(count)
    )
    name = f"rerank({per_request} documents per request over {documents.name}, queries {queries.name})"
    return PromptSet(prompts, name, documents.sizing)
