"""Token counting. Sources, in order of trust: the server's `usage`, a tokenizer (a local
tokenizer.json, a GGUF file's own vocabulary, or the server's /tokenize), counted chunks.

Nothing here downloads anything: tokenizers come from files the user names or from the server.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

import aiohttp

from tokenrace.errors import InvalidInput, UsageError
from tokenrace.model.records import RequestRecord


class Tokenizer(Protocol):
    name: str  # e.g. "tokenizer.json:/path", "gguf:/path", "server:/tokenize"

    async def encode(self, text: str) -> list[int]: ...

    async def decode(self, ids: list[int]) -> str: ...


class HFTokenizer:
    """A local tokenizer.json, through the `tokenizers` library."""

    def __init__(self, path: Path) -> None:
        from tokenizers import Tokenizer as _T  # noqa: PLC0415 - import cost: tokenizers only for a tokenizer.json

        self._tok = _T.from_file(str(path))
        self.name = f"tokenizer.json:{path}"
        self.local = True

    async def encode(self, text: str) -> list[int]:
        return list(self._tok.encode(text, add_special_tokens=False).ids)

    async def decode(self, ids: list[int]) -> str:
        return str(self._tok.decode(ids))


class GGUFTokenizer:
    """The vocabulary inside a GGUF file, loaded vocab-only through llama-cpp-python."""

    def __init__(self, path: Path) -> None:
        try:
            from llama_cpp import Llama  # noqa: PLC0415 - optional dependency: llama-cpp-python is the embedded extra
        except ImportError:
            raise UsageError(
                "a GGUF tokenizer needs llama-cpp-python: pip install 'tokenrace[embedded]', or pass a tokenizer.json"
            ) from None
        self._llm = Llama(model_path=str(path), vocab_only=True, verbose=False)
        self.name = f"gguf:{path}"
        self.local = True

    async def encode(self, text: str) -> list[int]:
        return list(self._llm.tokenize(text.encode("utf-8"), add_bos=False, special=False))

    async def decode(self, ids: list[int]) -> str:
        return self._llm.detokenize(ids).decode("utf-8", "replace")


class ServerTokenizer:
    """The server's own /tokenize and /detokenize (llama.cpp and vLLM shapes)."""

    def __init__(self, session: aiohttp.ClientSession, root: str, model: str, headers: dict[str, str]) -> None:
        self._s = session
        self._root = root.rstrip("/")
        self._model = model
        self._headers = headers
        self.name = "server:/tokenize"
        self.local = False
        self.decodes = True  # /detokenize answers (probed): needed to cut a text to an exact length

    async def encode(self, text: str) -> list[int]:
        body = {"content": text, "prompt": text, "model": self._model, "add_special_tokens": False}
        async with self._s.post(f"{self._root}/tokenize", json=body, headers=self._headers) as r:
            r.raise_for_status()
            obj: Any = await r.json(content_type=None)
        tokens = obj.get("tokens")
        if not isinstance(tokens, list):
            raise ValueError("no 'tokens' list in /tokenize answer")
        return [t if isinstance(t, int) else t.get("id", 0) for t in tokens]

    async def decode(self, ids: list[int]) -> str:
        body = {"tokens": ids, "model": self._model}
        async with self._s.post(f"{self._root}/detokenize", json=body, headers=self._headers) as r:
            r.raise_for_status()
            obj: Any = await r.json(content_type=None)
        return str(obj.get("content", obj.get("prompt", "")))


def load_tokenizer(path: str) -> Tokenizer:
    p = Path(path)
    if not p.exists():
        raise InvalidInput("tokenizer", f"{path}: no such file")
    if p.is_dir():
        p = p / "tokenizer.json"
        if not p.exists():
            raise InvalidInput("tokenizer", f"{path}: the folder has no tokenizer.json")
    if p.suffix == ".gguf":
        return GGUFTokenizer(p)
    return HFTokenizer(p)


async def probe_server_tokenizer(tok: ServerTokenizer) -> bool:
    try:
        ids = await tok.encode("hello world")
    except Exception:  # noqa: BLE001 - any failure means "this server has no usable /tokenize"
        return False
    try:
        tok.decodes = bool(ids) and "hello" in await tok.decode(ids)
    except Exception:  # noqa: BLE001 - counting still works; exact sizing falls back to word counts
        tok.decodes = False
    return len(ids) > 0


def can_decode(tok: Tokenizer | None) -> bool:
    """Whether `tok` can turn ids back into text (a server without /detokenize cannot)."""
    return tok is not None and getattr(tok, "decodes", True)


async def fill_token_counts(rec: RequestRecord, prompt_text: str, tok: Tokenizer | None) -> None:
    """Set output/prompt token counts and their sources, and per-chunk counts when derivable."""
    usage = rec.usage or {}
    if isinstance(usage.get("completion_tokens"), int):
        rec.output_tokens, rec.output_tokens_source = usage["completion_tokens"], "usage"
    elif tok is not None and rec.text:
        rec.output_tokens, rec.output_tokens_source = await _count(tok, rec.text), "tokenizer"
    elif rec.chunk_ns:
        rec.output_tokens, rec.output_tokens_source = len(rec.chunk_ns), "chunks"
    if isinstance(usage.get("prompt_tokens"), int):
        rec.prompt_tokens, rec.prompt_tokens_source = usage["prompt_tokens"], "usage"
    elif tok is not None and prompt_text:
        rec.prompt_tokens, rec.prompt_tokens_source = await _count(tok, prompt_text), "tokenizer"
    await _fill_streamed_tokens(rec, tok)
    await _fill_chunk_tokens(rec, tok)


async def _fill_streamed_tokens(rec: RequestRecord, tok: Tokenizer | None) -> None:
    """The output tokens the client saw streamed, apart from what usage reports: the content chunks
    when they match the reported count (one token each, the usual stream), else the tokenizer's count
    of the text (one more encode, only for a stream whose chunks and usage disagree), else the
    chunks. Streams only: a whole body has no chunks to count."""
    n = len(rec.chunk_ns)
    if n == 0:
        return
    if rec.output_tokens_source != "usage" or rec.output_tokens == n:
        counted = rec.output_tokens if rec.output_tokens_source == "tokenizer" else None
        rec.streamed_tokens, rec.streamed_tokens_source = (counted, "tokenizer") if counted else (n, "chunks")
        return
    counted = await _count(tok, rec.text) if tok is not None and rec.text else None
    rec.streamed_tokens, rec.streamed_tokens_source = (counted, "tokenizer") if counted else (n, "chunks")


async def _count(tok: Tokenizer, text: str) -> int | None:
    try:
        return len(await tok.encode(text))
    except Exception:  # noqa: BLE001 - a failed count is unknown, not a failed request
        return None


async def _fill_chunk_tokens(rec: RequestRecord, tok: Tokenizer | None) -> None:
    n = len(rec.chunk_ns)
    if n == 0 or rec.output_tokens is None or rec.output_tokens_source == "chunks":
        return
    if rec.output_tokens == n:
        rec.chunk_tokens = [1] * n
        return
    if tok is None or not getattr(tok, "local", False):
        return
    # Tokens of chunk i = tokens(prefix up to chunk i) - tokens(prefix before it). Exact when the
    # tokenizer does not merge across chunk borders, which holds for text a model emitted token by
    # token; kept only when the total agrees with the request's count.
    counts, prev, pos = [], 0, 0
    for chars in rec.chunk_chars:
        pos += chars
        cur = len(await tok.encode(rec.text[:pos]))
        counts.append(cur - prev)
        prev = cur
    if sum(counts) == rec.output_tokens and all(c >= 0 for c in counts):
        rec.chunk_tokens = counts
