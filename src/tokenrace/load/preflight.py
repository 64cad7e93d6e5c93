"""Preflight: learn what the endpoint serves and fail fast, in one actionable line, when the run
cannot work (wrong URL, bad key, unknown model)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import aiohttp
import orjson

from tokenrace.client.openai import error_message_from_body
from tokenrace.errors import InvalidInput, PreflightError
from tokenrace.model.records import RequestRecord
from tokenrace.redact import Redactor

MODELS_TIMEOUT_S = 15.0


@dataclass(slots=True)
class ServerInfo:
    models: list[str]
    models_answer: Any  # the raw /v1/models JSON, for the manifest
    headers: dict[str, str]


async def list_models(
    session: aiohttp.ClientSession, base_url: str, headers: dict[str, str], key_source: str | None, redact: Redactor
) -> ServerInfo:
    url = f"{base_url}/models"
    connect_s = session.timeout.sock_connect  # the run's --timeout-connect holds here too
    try:
        async with session.get(
            url, headers=headers, timeout=aiohttp.ClientTimeout(total=MODELS_TIMEOUT_S, sock_connect=connect_s)
        ) as r:
            raw = await r.read()
            status = r.status
            resp_headers = {k.lower(): v for k, v in r.headers.items() if k.lower() in ("server", "x-powered-by")}
    except (aiohttp.ClientError, OSError, TimeoutError) as exc:
        raise PreflightError(
            redact(
                f"cannot reach {url}: {_reason(exc, connect_s)}; check --url (a base URL such as http://localhost:8000/v1)"
            )
        ) from None
    if status in (401, 403):
        raise PreflightError(_auth_message(status, key_source, raw, redact))
    if status == 404:
        # Some servers have no /v1/models; the first request will tell whether the URL is right.
        return ServerInfo([], None, resp_headers)
    if status >= 400:
        raise PreflightError(redact(f"GET {url} answered HTTP {status}: {error_message_from_body(raw)}"))
    try:
        answer = orjson.loads(raw)
        models = [m["id"] for m in answer.get("data", []) if isinstance(m, dict) and "id" in m]
    except (orjson.JSONDecodeError, AttributeError, TypeError):
        raise PreflightError(
            f"GET {url} did not answer with an OpenAI model list; is this an OpenAI-compatible base URL?"
        ) from None
    return ServerInfo(models, answer, resp_headers)


def _reason(exc: BaseException, connect_s: float | None) -> str:
    if isinstance(exc, aiohttp.ConnectionTimeoutError):
        return f"connect timed out after {connect_s:g} s" if connect_s else "connect timed out"
    if isinstance(exc, TimeoutError):
        return f"no answer within {MODELS_TIMEOUT_S:g} s"
    return str(exc) or type(exc).__name__


def _auth_message(status: int, key_source: str | None, raw: bytes, redact: Redactor) -> str:
    where = (
        f"the key came from {key_source}"
        if key_source
        else "no API key was given (use --api-key or an env var such as OPENAI_API_KEY)"
    )
    detail = error_message_from_body(raw) or ""
    return redact(f"HTTP {status}: the server rejected the API key; {where}. {detail}".strip())


def choose_model(requested: str | None, info: ServerInfo) -> str:
    if requested:
        if info.models and requested not in info.models:
            raise PreflightError(f"unknown model {requested!r}; the server offers: {', '.join(info.models[:20])}")
        return requested
    if not info.models:
        raise InvalidInput("model", "the server lists no models: name the one to use")
    return info.models[0]


def check_first(
    rec: RequestRecord, model: str, key_source: str | None, models: list[str], url: str, api: str = "chat"
) -> None:
    """Turn a first-request failure that dooms the whole run into a PreflightError (the record stays
    in records.jsonl with its status and message)."""
    if rec.status in (401, 403):
        where = f"the key came from {key_source}" if key_source else "no API key was given"
        raise PreflightError(
            f"HTTP {rec.status}: the server rejected the API key; {where}. {rec.error_message or ''}".strip()
        )
    if rec.status == 404 and api not in ("chat", "completions"):
        # The message carries the API's own hint: most often the server lacks this API, not the model.
        raise PreflightError(rec.error_message or f"HTTP 404 from the {api} API at {url}")
    if rec.status == 404:
        offered = f"; the server offers: {', '.join(models[:20])}" if models else ""
        raise PreflightError(f"HTTP 404 for model {model!r} at {url}: {rec.error_message}{offered}")
    if rec.error_kind in ("connection_refused", "dns", "timeout_connect", "connect_error"):
        raise PreflightError(f"cannot connect to {url}: {rec.error_message}")
