from __future__ import annotations

import asyncio
import platform
import time
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
from aiohttp import web

from tokenrace import __version__
from tokenrace.doctor.environment import collect_environment, probe_server_environment
from tokenrace.doctor.probe import RecordedProbe
from tokenrace.model.server import ServerProbe

from .scenarios import FIXTURES


def test_real_collect_is_fast_and_sane() -> None:
    collect_environment()  # warm imports (psutil) once
    start = time.perf_counter()
    env = collect_environment()
    elapsed = time.perf_counter() - start
    assert elapsed < 1.0, elapsed
    assert env.python == platform.python_version() and env.tokenrace == __version__
    assert isinstance(env.cpu_cores, int) and env.cpu_cores >= 1
    assert env.ram_total_bytes and env.ram_total_bytes > 2**28
    assert env.os and env.kernel and env.cpu_model
    assert env.gpu_count == len(env.gpus)
    if env.gpu_count == 0:
        assert env.driver is None and env.cuda is None


def test_recorded_healthy_machine() -> None:
    env = collect_environment(RecordedProbe(FIXTURES / "healthy-h100"))
    assert [g.model_dump() for g in env.gpus] == [
        {"name": "NVIDIA H100 80GB HBM3", "memory_mib": 81559, "bus_id": "00000000:18:00.0"}
    ]
    assert (env.gpu_count, env.driver, env.cuda, env.gpu_source) == (1, "550.54.15", "12.4", "nvidia-smi")
    assert env.cpu_model == "Intel(R) Xeon(R) Platinum 8480+" and env.cpu_cores == 4
    assert env.os == "Ubuntu 22.04.4 LTS" and env.kernel == "6.5.0-27-generic"
    assert env.ram_total_bytes == 1024 * 2**30
    assert "nvcc" not in env.model_dump()  # fast mode


def test_recorded_slow_fields() -> None:
    env = collect_environment(RecordedProbe(FIXTURES / "healthy-h100"), fast=False)
    assert env.nvcc == "12.4"
    assert env.torch.version == "2.5.1+cu124"
    assert env.engines["vllm"] == "0.6.4.post1"


def test_recorded_machines_without_a_working_gpu() -> None:
    for name in ("no-gpu", "driver-not-loaded"):
        env = collect_environment(RecordedProbe(FIXTURES / name))
        assert (env.gpus, env.gpu_count, env.driver, env.cuda) == ([], 0, None, None), name


# ---- the server side --------------------------------------------------------------------------

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def json_route(body: Any, headers: dict[str, str] | None = None) -> Handler:
    async def handler(request: web.Request) -> web.StreamResponse:
        return web.json_response(body, headers=headers)

    return handler


async def probe_app(routes: dict[str, Handler], base_path: str = "/v1") -> ServerProbe:
    app = web.Application()
    for path, handler in routes.items():
        app.router.add_get(path, handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    try:
        async with aiohttp.ClientSession() as session:
            return await probe_server_environment(session, f"http://127.0.0.1:{port}{base_path}")
    finally:
        await runner.cleanup()


def test_vllm_server() -> None:
    models = {
        "object": "list",
        "data": [{"id": "Qwen/Qwen2.5-7B-Instruct", "object": "model", "owned_by": "vllm", "max_model_len": 32768}],
    }
    routes = {
        "/v1/models": json_route(models, {"Server": "uvicorn"}),
        "/version": json_route({"version": "0.6.4.post1"}),
    }
    env = asyncio.run(probe_app(routes))
    assert (env.engine, env.engine_version, env.max_model_len) == ("vllm", "0.6.4.post1", 32768)
    assert env.models[0].id == "Qwen/Qwen2.5-7B-Instruct"
    assert env.headers["server"] == "uvicorn"
    assert env.endpoints.model_dump() == {"models": 200, "version": 200}


def test_llama_cpp_server_without_v1_in_the_base_url() -> None:
    models = {
        "object": "list",
        "data": [
            {
                "id": "smollm2.gguf",
                "object": "model",
                "owned_by": "llamacpp",
                "meta": {"n_ctx_train": 8192, "n_params": 135000000},
            }
        ],
    }
    routes = {
        "/v1/models": json_route(models, {"Server": "llama.cpp"}),
        "/props": json_route({"build_info": "b4240-a4e6f0b5"}),
    }
    env = asyncio.run(probe_app(routes, base_path=""))
    assert (env.engine, env.engine_version) == ("llama.cpp", "b4240-a4e6f0b5")
    assert env.models[0].meta == {"n_ctx_train": 8192, "n_params": 135000000}
    assert env.endpoints.version == 404


def test_sglang_and_ollama() -> None:
    sglang = {
        "/v1/models": json_route({"data": [{"id": "m", "owned_by": "sglang", "max_model_len": 4096}]}),
        "/get_server_info": json_route({"version": "0.4.0.post1"}),
    }
    assert asyncio.run(probe_app(sglang)).engine_version == "0.4.0.post1"
    ollama = {
        "/v1/models": json_route({"data": [{"id": "llama3.2:1b", "owned_by": "library"}]}),
        "/api/version": json_route({"version": "0.5.1"}),
    }
    env = asyncio.run(probe_app(ollama))
    assert (env.engine, env.engine_version) == ("ollama", "0.5.1")


def test_hosted_api_headers() -> None:
    openai = {
        "/v1/models": json_route(
            {"data": [{"id": "gpt-4o-mini", "owned_by": "system"}]}, {"openai-version": "2020-10-01"}
        )
    }
    assert asyncio.run(probe_app(openai)).engine == "openai"
    groq = {
        "/v1/models": json_route(
            {"data": [{"id": "llama-3.3-70b-versatile", "owned_by": "Meta", "context_window": 131072}]},
            {"x-groq-region": "us-east-1"},
        )
    }
    env = asyncio.run(probe_app(groq))
    assert env.engine == "groq" and env.models[0].max_model_len == 131072
    assert env.headers["x-groq-region"] == "us-east-1"


def test_errors_give_none_and_never_raise() -> None:
    async def boom(request: web.Request) -> web.StreamResponse:
        raise web.HTTPInternalServerError()

    async def not_json(request: web.Request) -> web.StreamResponse:
        return web.Response(text="<html>hi</html>")

    env = asyncio.run(probe_app({"/v1/models": boom, "/version": not_json}))
    assert (env.engine, env.engine_version, env.models, env.max_model_len) == (None, None, [], None)
    assert env.endpoints.model_dump() == {"models": 500, "version": 200}

    async def unreachable() -> ServerProbe:
        async with aiohttp.ClientSession() as session:
            return await probe_server_environment(session, "http://127.0.0.1:9/v1")

    env = asyncio.run(unreachable())
    assert env.engine is None and env.endpoints.model_dump() == {"models": None, "version": None}
