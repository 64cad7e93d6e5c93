"""The aiohttp application of the fake OpenAI-compatible server.

Routes: GET /v1/models, /health, /version, /metrics, /dcgm/metrics, /fake/log, /fake/stats;
POST /v1/chat/completions, /v1/completions, /v1/responses (OpenAI Responses), /v1/messages
(Anthropic Messages), /v1/embeddings, /v1/rerank (Cohere/Jina/vLLM shape), /rerank (TEI's shape),
/tokenize, /fake/reset.
`build_app(config)` is the public entry; see `fake_server` for ways to run it.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import random
import socket
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from aiohttp import web
from pydantic import ValidationError

from tokenrace import __version__
from tokenrace.fakes.fake_cache import PrefixCache
from tokenrace.fakes.fake_config import ApiKind, FakeConfig, as_config, merge_overrides
from tokenrace.fakes.fake_dcgm import dcgm_page
from tokenrace.fakes.fake_images import ImageError, received_images
from tokenrace.fakes.fake_log import RequestRecord, SendLog
from tokenrace.fakes.fake_openai import (
    Endpoint,
    Json,
    ResponseMeta,
    chat_body,
    chat_prompt_text,
    chat_prompt_tokens,
    completion_prompt_text,
    completion_prompt_tokens,
    count_tokens,
    error_body,
    messages_prompt_text,
    responses_prompt_text,
)
from tokenrace.fakes.fake_plan import (
    GenRequest,
    Pacer,
    ms_to_ns,
    plan_stream,
    sleep_until,
    token_groups,
)
from tokenrace.fakes.fake_pooling import PoolingBadRequest, PoolingKind, pooling_answer, read_pooling
from tokenrace.fakes.fake_spec import SpecCounters
from tokenrace.fakes.fake_tools import offered_tool, responses_tool_items, tool_message
from tokenrace.fakes.fake_wire import responses_object, responses_usage, wire_for

SSE_HEADERS = {"Content-Type": "text/event-stream; charset=utf-8", "Cache-Control": "no-cache"}
METRICS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


@dataclass
class ServerState:
    config: FakeConfig
    log: SendLog
    # One simulated prefix cache per block geometry (size, unit, capacity).
    caches: dict[tuple[int, str, int | None], PrefixCache] = field(default_factory=dict)
    slots: asyncio.Semaphore | None = None  # the server-wide generation slots (config.slots)
    spec: SpecCounters = field(default_factory=SpecCounters)
    started_s: float = field(default_factory=time.perf_counter)
    dcgm_scrapes: int = 0
    answered: set[str] = field(default_factory=set)  # prompts answered before (config.repeat_speedup)

    def cache_for(self, config: FakeConfig) -> PrefixCache:
        size, unit, capacity = config.cache_block_size, config.cache_block_unit, config.cache_capacity_blocks
        key = (size, unit, capacity)
        if key not in self.caches:
            self.caches[key] = PrefixCache(size, unit, capacity)
        return self.caches[key]


STATE = web.AppKey("fake_state", ServerState)


class BadRequest(Exception):
    """A request the fake rejects with 400 (message goes in the OpenAI error JSON)."""


class ModelNotFound(Exception):
    """The request names a model the fake does not serve (404)."""


def build_app(config: FakeConfig | Mapping[str, Any] | None = None) -> web.Application:
    """The fake server as an aiohttp Application (run it with any aiohttp runner)."""
    app = web.Application()
    state = ServerState(as_config(config), SendLog())
    state.slots = asyncio.Semaphore(state.config.slots) if state.config.slots else None
    app[STATE] = state
    app.cleanup_ctx.append(_log_file_ctx)
    app.router.add_get("/v1/models", list_models)
    app.router.add_post("/v1/chat/completions", chat_completions)
    app.router.add_post("/v1/completions", completions)
    app.router.add_post("/v1/responses", responses)
    app.router.add_post("/v1/messages", messages)
    app.router.add_post("/v1/embeddings", embeddings)
    app.router.add_post("/v1/rerank", rerank)
    app.router.add_post("/rerank", tei_rerank)
    app.router.add_get("/health", health)
    app.router.add_get("/version", version)
    app.router.add_post("/tokenize", tokenize)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/dcgm/metrics", dcgm_metrics)
    app.router.add_get("/fake/log", fake_log)
    app.router.add_post("/fake/reset", fake_reset)
    app.router.add_get("/fake/stats", fake_stats)
    return app


async def _log_file_ctx(app: web.Application) -> AsyncIterator[None]:
    """Open `log_path` (append) for the app's lifetime, if configured."""
    state = app[STATE]
    if state.config.log_path is None:
        yield
        return
    with open(state.config.log_path, "ab") as log_file:
        state.log.log_file = log_file
        yield
        state.log.log_file = None


# --- small helpers -------------------------------------------------------------------


def json_response(obj: Any, status: int = 200, headers: Mapping[str, str] | None = None) -> web.Response:
    return web.Response(body=orjson.dumps(obj), status=status, content_type="application/json", headers=headers)


def error_response(status: int, message: str, type_: str, code: str | None) -> web.Response:
    return json_response(error_body(message, type_, code), status=status)


def _auth_error(request: web.Request, config: FakeConfig) -> web.Response | None:
    """The key may come as `Authorization: Bearer` (OpenAI) or `x-api-key` (Anthropic)."""
    key = config.api_key
    if (
        key is None
        or request.headers.get("Authorization") == f"Bearer {key}"
        or request.headers.get("x-api-key") == key
    ):
        return None
    return error_response(401, "Incorrect API key provided.", "invalid_request_error", "invalid_api_key")


AUTH_HEADERS = ("authorization", "x-api-key", "api-key", "anthropic-version")


def _auth_header_names(request: web.Request) -> list[str]:
    return sorted(h for h in AUTH_HEADERS if h in request.headers)


def _not_served(request: web.Request, api: ApiKind) -> web.Response | None:
    """404 for an API the config leaves out, as a server without that route answers."""
    apis = request.app[STATE].config.apis
    if apis is None or api in apis:
        return None
    return web.Response(status=404, text="404: Not Found")


async def _read_json_object(request: web.Request) -> Json:
    try:
        body = orjson.loads(await request.read())
    except orjson.JSONDecodeError as exc:
        raise BadRequest(f"Invalid JSON body: {exc}") from exc
    if not isinstance(body, dict):
        raise BadRequest("The request body must be a JSON object.")
    return body


def _abort(request: web.Request) -> None:
    """Drop the TCP connection now: no response, no FIN handshake."""
    if request.transport is not None:
        request.transport.abort()


def _tcp_nodelay(request: web.Request) -> bool | None:
    """Whether Nagle is off on this connection (aiohttp turns it off; the log proves it)."""
    sock = request.transport.get_extra_info("socket") if request.transport is not None else None
    if sock is None or sock.family not in (socket.AF_INET, socket.AF_INET6):
        return None
    return bool(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))


def _flush_headers(response: web.StreamResponse) -> None:
    """Put buffered response headers on the wire now.

    aiohttp holds headers back to coalesce them with the first body write; real
    servers send them at once, and a stream that opens with a long wait should
    too. send_headers() is not public API, hence the guarded lookup.
    """
    writer = getattr(response, "_payload_writer", None)
    send_headers = getattr(writer, "send_headers", None)
    if callable(send_headers):
        send_headers()


# --- simple endpoints ----------------------------------------------------------------


async def list_models(request: web.Request) -> web.Response:
    config = request.app[STATE].config
    denied = _auth_error(request, config)
    if denied is not None:
        return denied
    data = [{"id": m, "object": "model", "created": 0, "owned_by": "fake"} for m in config.models]
    return json_response({"object": "list", "data": data})


async def health(request: web.Request) -> web.Response:
    return json_response({"status": "ok"})


async def version(request: web.Request) -> web.Response:
    return json_response({"version": f"fake-{__version__}"})


async def tokenize(request: web.Request) -> web.Response:
    """llama.cpp-style {"content"} -> {"tokens"}; vLLM-style {"prompt"|"messages"} adds count."""
    try:
        body = await _read_json_object(request)
    except BadRequest as exc:
        return error_response(400, str(exc), "invalid_request_error", "invalid_json")
    if "content" in body:
        return json_response({"tokens": list(range(count_tokens(str(body["content"]))))})
    if isinstance(body.get("messages"), list):
        n = chat_prompt_tokens(body["messages"])
    else:
        n = completion_prompt_tokens(body.get("prompt", ""))
    return json_response({"tokens": list(range(n)), "count": n, "max_model_len": 1 << 20})


async def metrics(request: web.Request) -> web.Response:
    state = request.app[STATE]
    config = state.config
    if config.metrics_text_path is None and config.spec_tokens == 0:
        return error_response(404, "No metrics configured.", "invalid_request_error", "not_found")
    body = Path(config.metrics_text_path).read_bytes() if config.metrics_text_path else b""
    if config.spec_tokens:
        spec = state.spec.metrics_text(config.models[0], config.spec_tokens, config.spec_engines)
        body += spec.encode()
    return web.Response(body=body, headers={"Content-Type": METRICS_CONTENT_TYPE})


async def dcgm_metrics(request: web.Request) -> web.Response:
    """A DCGM exporter's page: the programmed GPUs' power, and their energy counters growing at it."""
    state = request.app[STATE]
    config = state.config
    if not config.dcgm_power_w:
        return error_response(404, "No DCGM exporter configured.", "invalid_request_error", "not_found")
    state.dcgm_scrapes += 1
    restarted = config.dcgm_restart_after is not None and state.dcgm_scrapes > config.dcgm_restart_after
    elapsed = time.perf_counter() - state.started_s
    text = dcgm_page(config.dcgm_power_w, elapsed, config.dcgm_energy, restarted)
    return web.Response(body=text.encode(), headers={"Content-Type": METRICS_CONTENT_TYPE})


async def fake_log(request: web.Request) -> web.Response:
    """The send log; `?wait_idle=S` first waits up to S seconds for in-flight requests to end."""
    log = request.app[STATE].log
    wait_s = float(request.query.get("wait_idle", "0"))
    give_up = time.monotonic() + wait_s
    while log.in_flight > 0 and time.monotonic() < give_up:
        await asyncio.sleep(0.005)
    return json_response([r.as_json() for r in log.records])


async def fake_reset(request: web.Request) -> web.Response:
    """Forget the send log and empty the prefix caches: the next request meets a cold server."""
    state = request.app[STATE]
    state.log.reset()
    state.caches.clear()
    state.answered.clear()
    return json_response({"status": "ok"})


async def fake_stats(request: web.Request) -> web.Response:
    state = request.app[STATE]
    drafts, draft_tokens, accepted = state.spec.totals(state.config.spec_engines)
    spec = {"drafts": drafts, "draft_tokens": draft_tokens, "accepted_tokens": accepted}
    blocks = sum(len(c) for c in state.caches.values())
    return json_response({**state.log.stats(), "cache_blocks": blocks, "spec": spec})


# --- generation ----------------------------------------------------------------------


async def chat_completions(request: web.Request) -> web.StreamResponse:
    return await _generate(request, "chat")


async def completions(request: web.Request) -> web.StreamResponse:
    return await _generate(request, "completions")


async def responses(request: web.Request) -> web.StreamResponse:
    return await _generate(request, "responses")


async def messages(request: web.Request) -> web.StreamResponse:
    return await _generate(request, "messages")


ID_PREFIX = {"chat": "chatcmpl", "completions": "cmpl", "responses": "resp", "messages": "msg"}


Respond = Callable[[web.Request, RequestRecord], Awaitable[web.StreamResponse]]


async def _generate(request: web.Request, endpoint: Endpoint) -> web.StreamResponse:
    return await _logged(request, endpoint, ID_PREFIX[endpoint], lambda r, rec: _respond(r, rec, endpoint))


async def _logged(request: web.Request, api: ApiKind, id_prefix: str, respond: Respond) -> web.StreamResponse:
    """Log the request from arrival to end, whatever happens in between."""
    arrival_ns = time.perf_counter_ns()
    missing = _not_served(request, api)
    if missing is not None:
        return missing
    log = request.app[STATE].log
    record = log.open(f"{id_prefix}-{uuid.uuid4().hex}", request.path, arrival_ns)
    record.auth_headers = _auth_header_names(request)
    record.tcp_nodelay = _tcp_nodelay(request)
    record.received_ns = getattr(request.protocol, "rx_ns", None)
    try:
        return await respond(request, record)
    except ConnectionError as exc:
        # The client left. The transport is closing, so aiohttp's attempt to
        # finish this placeholder fails quietly instead of logging a traceback.
        record.error = f"client disconnected: {type(exc).__name__}"
        return web.Response(status=499)
    finally:
        log.close(record)


async def _respond(request: web.Request, record: RequestRecord, endpoint: Endpoint) -> web.StreamResponse:
    state = request.app[STATE]
    denied = _auth_error(request, state.config)
    if denied is not None:
        return await _send_now(request, record, denied)
    try:
        body = await _read_json_object(request)
        record.stream = body.get("stream") is True
        _note_session(record, request, body, state.config.session_header)
        config = _request_config(state.config, body, request.headers.get("x-fake-fault"))
        model = _check_model(body, config)
    except BadRequest as exc:
        return await _send_now(request, record, _bad_request(exc))
    except ModelNotFound as exc:
        error = error_response(404, str(exc), "invalid_request_error", "model_not_found")
        return await _send_now(request, record, error)
    return await _dispatch(request, record, endpoint, body, config, model)


async def _dispatch(
    request: web.Request,
    record: RequestRecord,
    endpoint: Endpoint,
    body: Json,
    config: FakeConfig,
    model: str,
) -> web.StreamResponse:
    config = _content_config(config, endpoint, body)
    config = _repeat_config(request.app[STATE], config, endpoint, body)
    # One RNG per request, seeded by arrival order: the same draws whatever the interleaving.
    rng = random.Random(f"{config.seed}:{record.seq}")
    try:
        req = _gen_request(record, endpoint, body, config, model, rng)
    except BadRequest as exc:
        return await _send_now(request, record, _bad_request(exc))
    if config.prefix_cache and req.fault not in ("500", "429", "refuse"):
        # A request refused before generating prefilled nothing, so it neither hits nor fills.
        lookup = request.app[STATE].cache_for(config).lookup_and_insert(_prompt_text(endpoint, body))
        req = dataclasses.replace(req, cached_tokens=lookup.cached_tokens)
    _fill_record(record, req)
    if config.spec_tokens and req.fault is None:
        spec_rng = random.Random(f"spec:{config.seed}:{record.seq}")  # its own draws: timing stays as it was
        engine = record.seq % config.spec_engines
        request.app[STATE].spec.generate(
            req.output_tokens, config.spec_tokens, config.spec_acceptance, spec_rng, engine
        )
    if req.fault in ("500", "429"):
        return await _send_now(request, record, _fault_error(req.fault))
    if req.fault == "refuse":
        _abort(request)
        return web.Response()  # never sent: the transport is gone
    async with _slot(request.app[STATE], record.arrival_ns) as start_ns:
        if record.stream:
            return await _stream(request, record, req, rng, start_ns)
        return await _send_body(request, record, req, rng, start_ns)


@contextlib.asynccontextmanager
async def _slot(state: ServerState, arrival_ns: int) -> AsyncIterator[int]:
    """Hold one generation slot while generating; without a free one, wait in the queue.
    Yields when generation starts: the programmed timing counts from then."""
    if state.slots is None:
        yield arrival_ns
        return
    async with state.slots:
        yield max(arrival_ns, time.perf_counter_ns())


def _content_config(config: FakeConfig, endpoint: Endpoint, body: Json) -> FakeConfig:
    """`config` with the `when_prompt_contains` settings of every key the prompt contains."""
    if not config.when_prompt_contains:
        return config
    try:
        text = _prompt_text(endpoint, body)
    except (KeyError, TypeError, AttributeError):
        return config  # a malformed prompt is rejected later, with its own message
    for key, settings in config.when_prompt_contains.items():
        if key in text:
            config = merge_overrides(config, settings)
    return config


def _repeat_config(state: ServerState, config: FakeConfig, endpoint: Endpoint, body: Json) -> FakeConfig:
    """`config` sped up `repeat_speedup` times for a prompt answered before: a cache of answers."""
    if config.repeat_speedup == 1:
        return config
    try:
        text = _prompt_text(endpoint, body)
    except (KeyError, TypeError, AttributeError):
        return config  # a malformed prompt is rejected later, with its own message
    seen = text in state.answered
    state.answered.add(text)
    if not seen:
        return config
    fast = config.repeat_speedup
    return merge_overrides(config, {"ttft_ms": config.ttft_ms / fast, "itl_ms": config.itl_ms / fast})


def _bad_request(exc: BadRequest) -> web.Response:
    return error_response(400, str(exc), "invalid_request_error", "bad_request")


def _fault_error(fault: str) -> web.Response:
    if fault == "429":
        message = "Injected fault: rate limit reached."
        resp = error_response(429, message, "rate_limit_error", "rate_limit_exceeded")
        resp.headers["Retry-After"] = "1"
        return resp
    return error_response(500, "Injected fault: internal server error.", "server_error", "internal_error")


def _fill_record(record: RequestRecord, req: GenRequest) -> None:
    record.fault = req.fault
    record.model = req.meta.model
    record.prompt_tokens = req.prompt_tokens
    record.completion_tokens = req.output_tokens
    record.cached_tokens = req.cached_tokens


def _note_session(record: RequestRecord, request: web.Request, body: Json, header: str) -> None:
    """Log the session header and the message count: what a session-pinning router sees."""
    record.session_id = request.headers.get(header)
    messages = body.get("messages")
    record.messages = len(messages) if isinstance(messages, list) else None


def _prompt_text(endpoint: Endpoint, body: Json) -> str:
    if endpoint == "chat":
        return chat_prompt_text(body["messages"])
    if endpoint == "responses":
        return responses_prompt_text(body)
    if endpoint == "messages":
        return messages_prompt_text(body)
    return completion_prompt_text(body["prompt"])


def _request_config(base: FakeConfig, body: Json, header_fault: str | None) -> FakeConfig:
    """The server config with the body's `fake` object and the x-fake-fault header applied."""
    override = body.get("fake") or {}
    if not isinstance(override, dict):
        raise BadRequest("`fake` must be a JSON object of FakeConfig fields.")
    if header_fault is not None:
        override = {**override, "fault": header_fault.strip()}
    try:
        return merge_overrides(base, override)
    except ValidationError as exc:
        raise BadRequest(f"Invalid fake override: {exc}") from exc


def _check_model(body: Json, config: FakeConfig) -> str:
    model = body.get("model")
    if model is None:
        return config.models[0]
    if model not in config.models:
        raise ModelNotFound(f"The model `{model}` does not exist.")
    return str(model)


def _gen_request(
    record: RequestRecord,
    endpoint: Endpoint,
    body: Json,
    config: FakeConfig,
    model: str,
    rng: random.Random,
) -> GenRequest:
    """Resolve sizes, fault and usage for one request. Raises BadRequest."""
    prompt_tokens = _prompt_tokens(endpoint, body)
    images = _images(record, body, config)
    fault = _pick_fault(config, record.seq, rng)
    words = tuple(config.answer.split()) if config.answer is not None else None
    cap = _max_tokens(body)
    output, finish = _output_length(config, cap, rng, words)
    if body.get("ignore_eos") is True and config.honours_ignore_eos and cap is not None and words is None:
        output, finish = cap, "length"  # vLLM, SGLang and llama.cpp then generate exactly max_tokens
    if fault == "empty":
        output, finish = 0, "stop"
    tool = offered_tool(body) if config.tool_calls and endpoint in ("chat", "responses") else None
    reasoning = min(config.reasoning_tokens, output) if endpoint != "completions" and tool is None else 0
    if tool is not None and finish == "stop":
        finish = "tool_calls"
    meta = ResponseMeta(record.id, int(time.time()), model, endpoint)
    usage = _include_usage(config, body, endpoint)
    return GenRequest(
        meta, config, prompt_tokens, output, reasoning, finish, usage, fault, images=images, tool_name=tool, words=words
    )


def _images(record: RequestRecord, body: Json, config: FakeConfig) -> int:
    """Decode (and log) the request's images; BadRequest for one that is not an image, or for any
    image when the server is set to refuse them."""
    try:
        images = received_images(body)
    except ImageError as exc:
        raise BadRequest(str(exc)) from None
    if images:
        record.images = [i.as_json() for i in images]
    if images and config.refuse_images:
        raise BadRequest("This model does not support image input.")
    return len(images)


def _prompt_tokens(endpoint: Endpoint, body: Json) -> int:
    if endpoint == "responses":
        if not isinstance(body.get("input"), (str, list)):
            raise BadRequest("`input` is required: a string or a list of input items.")
        return count_tokens(responses_prompt_text(body))
    if endpoint == "messages":
        if not isinstance(body.get("messages"), list):
            raise BadRequest("messages: Field required")
        if not isinstance(body.get("max_tokens"), int):
            raise BadRequest("max_tokens: Field required")
        return count_tokens(messages_prompt_text(body))
    if endpoint == "chat":
        messages = body.get("messages")
        if not isinstance(messages, list):
            raise BadRequest("`messages` is required and must be a list.")
        return chat_prompt_tokens(messages)
    if body.get("prompt") is None:
        raise BadRequest("`prompt` is required.")
    return completion_prompt_tokens(body["prompt"])


def _pick_fault(config: FakeConfig, seq: int, rng: random.Random) -> str | None:
    if config.fault is None:
        return None
    if config.fault_every is not None and seq % config.fault_every != 0:
        return None
    if config.fault_rate < 1.0 and rng.random() >= config.fault_rate:
        return None
    return config.fault


def _max_tokens(body: Json) -> int | None:
    caps = [body[k] for k in ("max_tokens", "max_completion_tokens", "max_output_tokens") if body.get(k) is not None]
    for cap in caps:
        if not isinstance(cap, int) or isinstance(cap, bool) or cap < 1:
            raise BadRequest(f"max_tokens must be a positive integer, got {cap!r}.")
    return min(caps) if caps else None


def _output_length(
    config: FakeConfig, cap: int | None, rng: random.Random, words: tuple[str, ...] | None = None
) -> tuple[int, str]:
    """Tokens to generate and the finish reason ("length" when max_tokens cut it)."""
    wanted = config.output_tokens if words is None else len(words)
    if words is None and config.output_tokens_std > 0:
        wanted = max(1, round(rng.gauss(config.output_tokens, config.output_tokens_std)))
    if cap is not None and wanted > cap:
        return cap, "length"
    return wanted, "stop"


def _include_usage(config: FakeConfig, body: Json, endpoint: Endpoint) -> bool:
    if config.usage != "auto":
        return config.usage == "always"
    if endpoint in ("responses", "messages"):
        return True  # these APIs always report usage
    if body.get("stream") is not True:
        return True  # non-streaming bodies carry usage unless usage="never"
    options = body.get("stream_options")
    return isinstance(options, dict) and options.get("include_usage") is True


# --- embeddings and rerank ----------------------------------------------------------


async def embeddings(request: web.Request) -> web.StreamResponse:
    return await _pool(request, "embeddings")


async def rerank(request: web.Request) -> web.StreamResponse:
    return await _pool(request, "rerank")


async def tei_rerank(request: web.Request) -> web.StreamResponse:
    return await _pool(request, "tei_rerank")


async def _pool(request: web.Request, kind: PoolingKind) -> web.StreamResponse:
    """One body, sent when every input is embedded (document ranked); logged like a generation."""
    prefix = "embd" if kind == "embeddings" else "rerank"
    return await _logged(request, kind, prefix, lambda r, rec: _pool_respond(r, rec, kind))


async def _pool_respond(request: web.Request, record: RequestRecord, kind: PoolingKind) -> web.StreamResponse:
    state = request.app[STATE]
    denied = _auth_error(request, state.config)
    if denied is not None:
        return await _send_now(request, record, denied)
    try:
        body = await _read_json_object(request)
        config = _request_config(state.config, body, request.headers.get("x-fake-fault"))
        req = read_pooling(kind, body)
        model = config.models[0] if kind == "tei_rerank" else _check_model(body, config)
    except (BadRequest, PoolingBadRequest) as exc:
        return await _send_now(request, record, error_response(400, str(exc), "invalid_request_error", "bad_request"))
    except ModelNotFound as exc:
        error = error_response(404, str(exc), "invalid_request_error", "model_not_found")
        return await _send_now(request, record, error)
    rng = random.Random(f"{config.seed}:{record.seq}")
    record.fault = _pick_fault(config, record.seq, rng)
    record.model, record.prompt_tokens, record.inputs = model, req.tokens, req.items
    if record.fault in ("500", "429"):
        return await _send_now(request, record, _fault_error(record.fault))
    if record.fault == "refuse":
        _abort(request)
        return web.Response()
    answer = pooling_answer(req, record.id, model, config.embedding_dim, rng)  # made before the wait
    if record.fault == "empty":
        answer = [] if isinstance(answer, list) else {**answer, "data": [], "results": []}
    per_item = config.embedding_ms_per_input if kind == "embeddings" else config.rerank_ms_per_document
    pacer = Pacer(record.arrival_ns, config, rng, record.in_flight_at_arrival, req.tokens)
    deadline = pacer.deadline(0, state.log.in_flight - 1) + ms_to_ns(per_item * req.items)
    if record.fault == "stall":
        deadline += ms_to_ns(config.stall_s * 1000)
    await sleep_until(deadline, ms_to_ns(config.spin_ms))
    if record.fault in ("truncate", "disconnect_midstream"):
        _abort(request)
        return web.Response()
    if record.fault == "malformed":
        return await _send_now(request, record, web.Response(body=b"{not json", content_type="application/json"))
    return await _send_now(request, record, json_response(answer))


# --- sending -------------------------------------------------------------------------


async def _send_now(request: web.Request, record: RequestRecord, resp: web.Response) -> web.Response:
    """Send a whole response now, stamping the moment its bytes go out."""
    resp.headers["x-request-id"] = record.id
    record.status = resp.status
    await resp.prepare(request)  # headers are buffered until the body is written
    record.chunks.append((time.perf_counter_ns(), record.completion_tokens, "body"))
    await resp.write_eof()
    record.end_ns = time.perf_counter_ns()
    return resp


async def _stream(
    request: web.Request, record: RequestRecord, req: GenRequest, rng: random.Random, start_ns: int
) -> web.StreamResponse:
    log = request.app[STATE].log
    resp = web.StreamResponse(status=200, headers={**SSE_HEADERS, "x-request-id": record.id})
    await resp.prepare(request)
    record.status = 200
    _flush_headers(resp)
    pacer = Pacer(start_ns, req.config, rng, record.in_flight_at_arrival, req.uncached_tokens, req.image_ms)
    spin_ns = ms_to_ns(req.config.spin_ms)
    for step in plan_stream(req):
        if step.kind == "abort":
            _abort(request)
            record.end_ns = time.perf_counter_ns()
            return resp
        if step.kind == "stall":
            await _stall(pacer, req.config.stall_s, spin_ns)
            continue
        if step.last_token is not None:
            await sleep_until(pacer.deadline(step.last_token, log.in_flight - 1), spin_ns)
        # Stamp, then hand the bytes to the transport in one write: nothing in
        # between can yield to the event loop.
        record.chunks.append((time.perf_counter_ns(), step.tokens, step.kind))
        await resp.write(step.data)
    record.end_ns = time.perf_counter_ns()
    await resp.write_eof()
    return resp


async def _stall(pacer: Pacer, stall_s: float, spin_ns: int) -> None:
    stall_ns = ms_to_ns(stall_s * 1000)
    pacer.shift(stall_ns)
    await sleep_until(time.perf_counter_ns() + stall_ns, spin_ns)


async def _send_body(
    request: web.Request, record: RequestRecord, req: GenRequest, rng: random.Random, start_ns: int
) -> web.StreamResponse:
    """Non-streaming: wait until the last token would be ready, then send one body."""
    log = request.app[STATE].log
    pacer = Pacer(start_ns, req.config, rng, record.in_flight_at_arrival, req.uncached_tokens, req.image_ms)
    spin_ns = ms_to_ns(req.config.spin_ms)
    if req.fault == "stall":
        pacer.shift(ms_to_ns(req.config.stall_s * 1000))
    # Walk the same chunk deadlines a stream would, so load_itl tracks in-flight changes.
    groups = token_groups(0, max(req.output_tokens, 1), req.config.tokens_per_chunk)
    for i, (first, size) in enumerate(groups):
        spin = spin_ns if i == len(groups) - 1 else 0  # only the send itself needs precision
        await sleep_until(pacer.deadline(first + size - 1, log.in_flight - 1), spin)
    if req.fault in ("truncate", "disconnect_midstream"):
        _abort(request)
        return web.Response()
    if req.fault == "malformed":
        resp = web.Response(body=b"{not json", content_type="application/json")
        return await _send_now(request, record, resp)
    return await _send_now(request, record, json_response(_full_body(req)))


def _full_body(req: GenRequest) -> Json:
    usage = req.usage() if req.include_usage else None
    reasoning, answer = req.texts()
    body: Json
    if req.tool_calls and req.meta.endpoint == "responses":
        assert req.tool_name is not None
        output = responses_tool_items(req.tool_name, req.output_tokens, req.tool_calls)
        body = responses_object(req, "completed", output, responses_usage(req))
    elif req.tool_calls:
        assert req.tool_name is not None
        body = chat_body(req.meta, "", "", req.finish_reason, usage)
        body["choices"][0]["message"].update(
            content=None, tool_calls=tool_message(req.tool_name, req.output_tokens, req.tool_calls)
        )
    else:
        body = wire_for(req.meta).body(req, reasoning, answer, usage)
    timings = req.timings()
    if timings is not None:
        body["timings"] = timings
    return body
