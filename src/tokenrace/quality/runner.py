"""Ask every item of a suite, judge each answer, and stream the results to the run directory.

items.jsonl gets one line per item as soon as it is judged (flushed), so a crash or Ctrl-C keeps
what was measured; quality.json is written at the end, or on interruption from the items so far.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO

import aiohttp
import orjson
from pydantic import JsonValue

from tokenrace.client.openai import OpenAIClient, Prompt, RequestOptions
from tokenrace.client.transport import Timeouts
from tokenrace.errors import InvalidInput, PreflightError, UsageError
from tokenrace.model.files import ITEMS, QUALITY
from tokenrace.model.records import RequestRecord
from tokenrace.quality.models import EngineInfo, ItemResult, QualityResult, QualityRunSettings, VerdictName
from tokenrace.quality.scoring import by_suite, score, speed
from tokenrace.quality.suites import Item
from tokenrace.runs.store import write_json


@dataclass(slots=True)
class QualitySettings:
    base_url: str
    model: str | None = None
    api_key: str | None = None
    key_source: str | None = None  # the variable the key came from: recorded, never the key
    seed: int = 0
    temperature: float = 0.0
    concurrency: int = 1
    api: str = "chat"
    timeouts: Timeouts = field(default_factory=Timeouts)
    samples: int | None = None  # items per suite, as asked (recorded in quality.json's settings)
    after: str | None = None  # the command this pass followed ("bench", "claim"), when one did
    extra_body: dict[str, JsonValue] = field(default_factory=dict)  # merged into every request's JSON
    extra_headers: dict[str, str] = field(default_factory=dict)


OnItem = Callable[[ItemResult], None]


async def run_quality(
    items: list[Item],
    settings: QualitySettings,
    out_dir: Path,
    engine: EngineInfo | None = None,
    on_item: OnItem | None = None,
) -> QualityResult:
    if settings.concurrency < 1:
        raise InvalidInput("concurrency", "must be at least 1")
    out_dir = Path(out_dir)
    if (out_dir / ITEMS).exists():
        raise UsageError(f"{out_dir} already holds a quality run; choose another -o")
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"cannot create {out_dir}: {exc.strerror}") from None
    options = RequestOptions(
        api=settings.api,
        stream=True,
        include_usage=True,
        max_tokens=None,  # each item sets its own
        temperature=settings.temperature,
        seed=settings.seed,
        extra_body=settings.extra_body,
        extra_headers=settings.extra_headers,
    )
    results: list[ItemResult] = []
    created = datetime.now(UTC).isoformat(timespec="seconds")
    client = OpenAIClient(settings.base_url, settings.model or "", settings.api_key, options, settings.timeouts)
    model = settings.model
    with open(out_dir / ITEMS, "ab") as sink:
        try:
            async with client:
                if not model:
                    model = await _first_model(client)
                    client.model = model
                fatal = await _ask_all(client, items, settings.concurrency, sink, results, on_item)
        except asyncio.CancelledError:
            _finish(out_dir, results, settings, model, created, engine, items, interrupted=True)
            raise
    if fatal is not None:
        _finish(out_dir, results, settings, model, created, engine, items, interrupted=True)
        raise PreflightError(f"{settings.base_url}: {fatal.error_message} (the answers so far are in {out_dir})")
    return _finish(out_dir, results, settings, model, created, engine, items, interrupted=False)


async def _first_model(client: OpenAIClient) -> str:
    """The first model the server lists, as bench does when --model is not given."""
    assert client.session is not None
    try:
        async with client.session.get(f"{client.base_url}/models", headers=client.headers()) as r:
            if r.status != 200:
                raise PreflightError(f"GET {client.base_url}/models answered HTTP {r.status}; name the model to ask")
            data = await r.json(content_type=None)
    except (aiohttp.ClientError, TimeoutError) as exc:
        raise PreflightError(
            f"cannot reach {client.base_url}: {client.redact(str(exc)) or type(exc).__name__}"
        ) from None
    models = [m.get("id") for m in (data.get("data") or []) if isinstance(m, dict) and m.get("id")]
    if not models:
        raise PreflightError(f"{client.base_url}/models lists no model; name the model to ask")
    return str(models[0])


async def _ask_all(
    client: OpenAIClient,
    items: list[Item],
    concurrency: int,
    sink: IO[bytes],
    results: list[ItemResult],
    on_item: OnItem | None,
) -> ItemResult | None:
    """Ask every item; returns the failed first answer that stopped the run, if one did.

    Every failed request is a record, but when the first answer already says the endpoint cannot
    serve these requests at all (refused, unauthorized, no such model or path), asking the other
    items would only repeat it: the run stops there, as bench's preflight does.
    """
    queue = list(enumerate(items))
    queue.reverse()
    fatal: list[ItemResult] = []

    async def worker() -> None:
        while queue and not fatal:
            seq, item = queue.pop()
            result = await ask(client, item, seq)
            sink.write(orjson.dumps(result.model_dump(mode="json")) + b"\n")
            sink.flush()
            results.append(result)
            if on_item is not None:
                on_item(result)
            if len(results) == 1 and result.error_kind in FATAL_FIRST:
                fatal.append(result)

    await asyncio.gather(*(worker() for _ in range(min(concurrency, len(items)))))
    return fatal[0] if fatal else None


FATAL_FIRST = {"connection_refused", "dns", "http_401", "http_403", "http_404"}


async def ask(client: OpenAIClient, item: Item, seq: int) -> ItemResult:
    """One request; a failed request is a result with an error kind, never an exception."""
    rec = RequestRecord(seq=seq)
    prompt = Prompt(messages=[{"role": "user", "content": item.prompt}], max_tokens=item.max_tokens)
    await client.send(prompt, rec)
    _count_tokens(rec)
    rec.settle(rec.begin_ns)  # an item's figures are spans: any origin will do
    if rec.ok:
        judged = item.check.check(rec.text)
        verdict: VerdictName = "right" if judged.correct else "wrong"
        output: str | None = rec.text
        reason = judged.reason
    else:
        verdict, output, reason = "error", rec.text or None, None
    return ItemResult(
        id=item.id,
        suite=item.suite,
        prompt=item.prompt,
        expected=item.check.model_dump(mode="json"),
        output=output,
        verdict=verdict,
        reason=reason,
        error_kind=None if rec.ok else rec.error_kind,
        error_message=None if rec.ok else rec.error_message,
        ttft_ms=rec.ttft_ms,
        tpot_ms=rec.tpot_ms,
        e2e_ms=rec.e2e_ms,
        prompt_tokens=rec.prompt_tokens,
        output_tokens=rec.output_tokens,
        output_tokens_source=rec.output_tokens_source,
        finish_reason=rec.finish_reason,
    )


def _count_tokens(rec: RequestRecord) -> None:
    usage = rec.usage or {}
    if isinstance(usage.get("completion_tokens"), int):
        rec.output_tokens, rec.output_tokens_source = usage["completion_tokens"], "usage"
    elif rec.chunk_ns:
        # Without usage, one content chunk is taken as one token (what llama.cpp and vLLM stream).
        rec.output_tokens, rec.output_tokens_source = len(rec.chunk_ns), "chunks"
    if isinstance(usage.get("prompt_tokens"), int):
        rec.prompt_tokens, rec.prompt_tokens_source = usage["prompt_tokens"], "usage"


def _finish(
    out_dir: Path,
    results: list[ItemResult],
    settings: QualitySettings,
    model: str | None,
    created: str,
    engine: EngineInfo | None,
    items: list[Item],
    interrupted: bool,
) -> QualityResult:
    suites = list(dict.fromkeys(i.suite for i in items))
    result = QualityResult(
        created_at=created,
        endpoint=settings.base_url,
        model=model or "",
        settings=_recorded(settings, suites, len(items)),
        suites={name: s for name, s in sorted(by_suite(results).items(), key=lambda kv: suites.index(kv[0]))},
        overall=score(results),
        speed=speed(results),
        engine=engine,
        interrupted=interrupted,
    )
    write_json(out_dir / QUALITY, result.model_dump(mode="json"))
    return result


def _recorded(settings: QualitySettings, suites: list[str], items: int) -> QualityRunSettings:
    """quality.json's settings: how the items were asked (never the key, only where it came from)."""
    recorded = QualityRunSettings(
        seed=settings.seed,
        temperature=settings.temperature,
        concurrency=settings.concurrency,
        api=settings.api,
        suites=suites,
        items=items,
        api_key_from=settings.key_source,
        extra_body=settings.extra_body or None,
        samples=settings.samples,
    )
    if settings.after is not None:
        recorded["after"] = settings.after
    return recorded
