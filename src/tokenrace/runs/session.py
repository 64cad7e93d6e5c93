"""One benchmark run against one endpoint: preflight, load, records to disk, summary, manifest."""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit

from tokenrace import __version__
from tokenrace.client.images import IMAGE_APIS
from tokenrace.client.openai import OpenAIClient, Prompt
from tokenrace.client.providers import HOSTED_HOSTS, ResolvedEndpoint
from tokenrace.client.request import POOLING_APIS
from tokenrace.client.structured import STRUCTURED_APIS
from tokenrace.doctor import collect_environment, probe_server_environment
from tokenrace.engines import WITH_METRICS, server_root
from tokenrace.errors import InvalidInput
from tokenrace.figures.cache import server_cache
from tokenrace.figures.client_load import ClientObservation
from tokenrace.figures.efficiency import check_spec
from tokenrace.load import prompts as prompt_sets
from tokenrace.load.calibration import CpuMeter, calibrated_ceiling
from tokenrace.load.content import DEFAULT_INPUT_TOKENS, content_prompts, parse_content
from tokenrace.load.preflight import check_first, choose_model, list_models
from tokenrace.load.prompts import PromptSet
from tokenrace.load.ray_workers import RayPool
from tokenrace.load.runner import Load, Runner
from tokenrace.load.tokens import ServerTokenizer, Tokenizer, fill_token_counts, load_tokenizer, probe_server_tokenizer
from tokenrace.load.worker_core import WorkerConfig
from tokenrace.load.workers import (
    Dispatcher,
    Pool,
    ProcessPool,
    WorkersLost,
    fault_warnings,
    manifest_section,
    peak_in_flight,
    resolve_count,
)
from tokenrace.load.workload import Built, WorkloadFiles, build_workload, read_workload_files
from tokenrace.model.environment import Environment
from tokenrace.model.files import RECORDS, SCHEMA_VERSION
from tokenrace.model.manifest import Manifest, PromptsInfo, WorkersInfo, Workload
from tokenrace.model.monitor import MonitorSettings, Resources
from tokenrace.model.records import RequestRecord
from tokenrace.model.summary import RunWarning, Summary
from tokenrace.monitor.energy import DcgmEnergy, EnergyMeter, EnergyWindow, NvmlEnergy, sharing_warnings
from tokenrace.monitor.server import detect_engine, is_local_url, local_server_pids, parse_metrics
from tokenrace.monitor.session import MonitorSession, load_timeseries
from tokenrace.redact import Redactor, redact_argv
from tokenrace.runs.api_fit import check_api_fit
from tokenrace.runs.instruments import monitor_for_bench
from tokenrace.runs.run import Run
from tokenrace.runs.settings import BenchSettings, PromptSpec
from tokenrace.runs.store import RunStore, default_run_dir
from tokenrace.runs.summary import EngineScrapes, RunContext, build_summary

Progress = Callable[[RequestRecord], None]
P = TypeVar("P")  # what a send takes: a prompt, or (LoadGen's runs) a request encoded ahead


@dataclass(frozen=True, slots=True)
class Inputs:
    """What a run reads from disk, read (and so checked) before its first network call."""

    prompts: PromptSet | None  # None: synthetic prompts, sized once the tokenizer is known
    files: WorkloadFiles
    tokenizer: Tokenizer | None  # a local tokenizer file; None: the server's, or none


def read_inputs(s: BenchSettings) -> Inputs:
    """Check every input the run was given, so a bad one is reported before any connection error."""
    s.load.validate(finite=bool(s.workload.trace_file or s.workload.sessions_file))
    if s.output is not None and (Path(s.output) / RECORDS).exists():
        raise InvalidInput("output", f"{s.output} already holds a run; choose another directory")
    _check_request(s)
    check_api_fit(s)
    if s.efficiency is not None:
        check_spec(s.efficiency)
    local = s.tokenizer is not None and s.tokenizer != "server"
    if s.prompts.content is not None:
        given: PromptSet | None = _content_prompts(s)
    else:
        given = None if s.prompts.input_tokens is not None else _given_prompts(s.prompts)
    return Inputs(
        prompts=given,
        files=read_workload_files(s.workload),
        tokenizer=load_tokenizer(s.tokenizer) if local and s.tokenizer else None,
    )


def _sends(load: Load) -> int | None:
    """How many requests a run of independent prompts sends in all (cold, warm-up, measured); None
    when only a duration bounds it."""
    if load.requests is None:
        return None
    return int(load.cold) + load.warmup + load.requests


def _check_request(s: BenchSettings) -> None:
    api = s.request.api
    if s.workload.images is not None and api not in IMAGE_APIS:
        raise InvalidInput("images", f"the {api} API takes no images; use one of {', '.join(IMAGE_APIS)}")
    if s.request.tools is not None and api not in STRUCTURED_APIS:
        raise InvalidInput("tools", f"the {api} API takes no tools; use one of {', '.join(STRUCTURED_APIS)}")
    if s.request.response_schema is not None and api not in STRUCTURED_APIS:
        raise InvalidInput(
            "response_format", f"the {api} API takes no response format; use one of {', '.join(STRUCTURED_APIS)}"
        )
    if s.request.max_tokens is not None and s.request.max_tokens < 1:
        raise InvalidInput("max_tokens", f"must be at least 1, got {s.request.max_tokens}")
    for name in ("connect", "first_byte", "idle", "total"):
        limit = getattr(s.timeouts, name)
        if limit is not None and not limit > 0:
            raise InvalidInput(f"timeout_{name}", f"must be a positive number of seconds, got {limit}")
    if s.max_error_rate is not None and not 0 <= s.max_error_rate <= 1:
        raise InvalidInput("max_error_rate", f"must be a share between 0 and 1, got {s.max_error_rate}")
    if not 0.5 < s.confidence < 1:
        raise InvalidInput("confidence", f"must lie between 0.5 and 1 (e.g. 0.95), got {s.confidence:g}")
    for param, url in (("metrics_url", s.metrics_url), ("dcgm_url", s.dcgm_url)):
        if url is not None:
            parts = urlsplit(url)
            if parts.scheme not in ("http", "https") or not parts.netloc:
                raise InvalidInput(param, f"must look like http://host:port/metrics, got {url!r}")


def _content_prompts(s: BenchSettings) -> PromptSet:
    """The --content prompts: every kind at one prompt and one output length, none repeated in a run."""
    spec = s.prompts
    if s.request.api in POOLING_APIS:
        raise InvalidInput("content", f"asks the model to write text; the {s.request.api} API generates none")
    if spec.text is not None or spec.file is not None:
        raise InvalidInput("content", "writes its own prompts; it cannot be combined with given prompts")
    kinds = parse_content(spec.content)
    input_tokens = int(spec.input_tokens[0]) if spec.input_tokens else DEFAULT_INPUT_TOKENS
    output_tokens = int(spec.output_tokens[0]) if spec.output_tokens else s.request.max_tokens or 256
    load = s.load
    # One prompt per request, so no random string is ever sent twice (duration runs: many).
    count = max(spec.count, (load.requests or 1024) + load.warmup + 1)
    return content_prompts(kinds, input_tokens, output_tokens, -(-count // len(kinds)), load.seed)


def _given_prompts(spec: PromptSpec) -> PromptSet:
    if spec.file:
        return prompt_sets.from_jsonl(spec.file)
    return prompt_sets.single(spec.text) if spec.text else prompt_sets.builtin()


async def build_prompts(
    spec: PromptSpec, tok: Tokenizer | None, seed: int | None, given: PromptSet | None = None, api: str = "chat"
) -> PromptSet:
    """The run's prompts: synthetic ones sized with `tok`, else `given` (or the spec's, read now).

    Embeddings and rerank requests carry several texts each: `batch_size` inputs, or a query and
    `documents` documents, each text sized as a prompt would be."""
    if api in POOLING_APIS:
        return await _pooling_prompts(spec, tok, seed, given, api)
    if spec.content is not None and given is not None:
        return given  # sized when they were written
    out_lengths = None
    if spec.output_tokens is not None:
        out_lengths = prompt_sets.draw_lengths(int(spec.output_tokens[0]), spec.output_tokens[1], spec.count, seed)
    if spec.input_tokens is not None:
        return await prompt_sets.synthetic(spec.input_tokens, tok, spec.count, seed, out_lengths)
    base = given if given is not None else _given_prompts(spec)
    if out_lengths is None:
        return base
    ps = tuple(replace(p, max_tokens=out_lengths[i % len(out_lengths)]) for i, p in enumerate(base.prompts))
    return PromptSet(ps, base.name)


async def _pooling_prompts(
    spec: PromptSpec, tok: Tokenizer | None, seed: int | None, given: PromptSet | None, api: str
) -> PromptSet:
    per_request = (spec.batch_size or 1) if api == "embeddings" else (spec.documents or prompt_sets.DEFAULT_DOCUMENTS)
    named = given if given is not None else _given_prompts(spec)  # --prompt, --prompts or the built-in set
    texts = named
    if spec.input_tokens is not None:
        texts = await prompt_sets.synthetic(spec.input_tokens, tok, spec.count * per_request, seed)
    if api == "embeddings":
        return prompt_sets.embedding_batches(texts, per_request, spec.count)
    return prompt_sets.rerank_sets(named, texts, per_request, spec.count)


def _monitor(s: BenchSettings, directory: Path, endpoint: ResolvedEndpoint, t0: int) -> MonitorSession | None:
    if not s.monitor:
        return None
    return monitor_for_bench(directory, endpoint.base_url, endpoint.provider, t0, s.monitor_interval_s, s.metrics_url)


async def _scrape_metrics(client: OpenAIClient, url: str) -> str | None:
    """The server's Prometheus text, or None (a missing /metrics never stops a run). The API key
    goes only to the endpoint's own host, never to another `--metrics-url` host."""
    assert client.session is not None
    same_host = urlsplit(url).netloc == urlsplit(client.base_url).netloc
    try:
        async with client.session.get(url, headers=client.headers() if same_host else {}) as r:
            return await r.text() if r.status == 200 else None
    except Exception:  # noqa: BLE001 - context only
        return None


def _engine_of(text: str) -> str | None:
    """The engine whose metric names a /metrics text uses, or None."""
    try:
        return detect_engine(parse_metrics(text, 0.0))
    except ValueError:
        return None


async def _environment(client: OpenAIClient, manifest: Manifest) -> None:
    """What makes two results comparable: this machine, and what the server says it is."""
    assert client.session is not None
    try:
        manifest.environment = collect_environment()
    except Exception as exc:  # noqa: BLE001 - the environment is context; it must never stop a run
        manifest.environment = Environment(error=f"{type(exc).__name__}: {exc}")
    manifest.server = await probe_server_environment(client.session, client.base_url, HOSTED_HOSTS)


class BenchSession:
    def __init__(
        self, settings: BenchSettings, progress: Progress | None = None, argv: list[str] | None = None
    ) -> None:
        assert settings.endpoint is not None, "resolve the endpoint (or start the embedded engine) first"
        self.s = settings
        self.endpoint: ResolvedEndpoint = settings.endpoint
        self.progress = progress
        self.redact = Redactor(*settings.secrets())
        self.argv = [self.redact(a) for a in redact_argv(argv if argv is not None else sys.argv)]
        self.tokenizer: Tokenizer | None = None
        self.store: RunStore | None = None
        self.built: Built | None = None
        self._written: set[int] = set()
        self.client_cpu_pct: float | None = None
        self.energy: EnergyWindow | None = None

    async def run(self) -> Run:
        s = self.s
        inputs = read_inputs(s)  # before the first network call: bad input is reported as such
        t0 = time.perf_counter_ns()
        started = datetime.now(UTC).isoformat()
        async with OpenAIClient(
            self.endpoint.base_url,
            s.model or "",
            self.endpoint.api_key,
            s.request,
            s.timeouts,
            max_connections=max(s.load.concurrency, s.load.max_concurrency or 0, 64),
        ) as client:
            assert client.session is not None
            for secret in s.secrets():
                client.redact.add(secret)
            info = await list_models(
                client.session, self.endpoint.base_url, client.headers(), self.endpoint.key_source, client.redact
            )
            client.model = choose_model(s.model, info)
            self.tokenizer = inputs.tokenizer or await self._tokenizer(client)
            prompts = await build_prompts(s.prompts, self.tokenizer, s.load.seed, inputs.prompts, s.request.api)
            built = await build_workload(
                s.workload, prompts, self.tokenizer, s.load.seed, s.load.requests or 64, inputs.files, _sends(s.load)
            )
            self.built = built
            directory = s.output or default_run_dir(s.label or client.model.split("/")[-1])
            self.store = RunStore(directory, t0, tuple(s.secrets()))
            manifest = self._manifest(client, info, prompts, built, started, t0)
            await _environment(client, manifest)
            self.store.write_manifest(manifest)
            pool, reason = await self._start_workers(client)
            try:
                dispatcher = Dispatcher(pool) if pool is not None else None
                manifest.workers = self._workers_section(reason, pool, dispatcher)
                self.store.write_manifest(manifest)
                runner = self._runner(client, info.models, built, dispatcher)
                summary = await self._measure(client, runner, manifest, t0, dispatcher, reason)
            finally:
                if pool is not None:
                    await pool.close()
        return Run(directory, "run", summary, manifest, interrupted=summary.interrupted)

    async def _start_workers(self, client: OpenAIClient) -> tuple[Pool | None, str | None]:
        """The pool of sending workers --workers/--ray ask for (None: this process sends)."""
        spec = self.s.workers
        if spec is None:
            return None, None
        load = self.s.load
        config = WorkerConfig(
            self.endpoint.base_url,
            client.model,
            self.endpoint.api_key,
            self.s.request,
            self.s.timeouts,
            max_connections=max(load.concurrency, load.max_concurrency or 0, 64),
            keep_awake=load.keep_awake,
        )
        pool: Pool
        if spec.ray is not None:
            pool = RayPool(config, spec.count, spec.ray)
            reason = None
        else:
            count, reason = resolve_count(spec, load.max_concurrency or load.concurrency)
            if count == 1 and spec.auto:
                return None, reason
            pool = ProcessPool(config, count)
        await pool.start()
        return pool, reason

    def _workers_section(
        self, reason: str | None, pool: Pool | None, dispatcher: Dispatcher | None
    ) -> WorkersInfo | None:
        spec = self.s.workers
        if spec is None:
            return None
        return WorkersInfo.model_validate(
            manifest_section("auto" if spec.auto else str(spec.count), reason, pool, dispatcher)
        )

    def _runner(self, client: OpenAIClient, models: list[str], built: Built, dispatcher: Dispatcher | None) -> Runner:
        if dispatcher is None:
            return Runner(self._send_checked(client.send, client, models), built.workload, self.s.load, self._finish)
        # The workers keep their own loops awake; the parent's timing is not what is measured.
        load = replace(self.s.load, keep_awake=False)
        send = self._send_checked(dispatcher.send, client, models)
        return Runner(send, built.workload, load, self._finish, lead_ns=dispatcher.lead_ns)

    async def _measure(
        self,
        client: OpenAIClient,
        runner: Runner,
        manifest: Manifest,
        t0: int,
        dispatcher: Dispatcher | None = None,
        reason: str | None = None,
    ) -> Summary:
        """Run the load with the side instruments around it; whatever happens, write what was measured."""
        assert self.store is not None
        monitor = _monitor(self.s, self.store.dir, self.endpoint, t0)
        if monitor is not None:
            manifest.monitor = MonitorSettings(interval_s=self.s.monitor_interval_s, metrics_url=monitor.metrics_url)
            await monitor.start()
        engine = manifest.server.engine if manifest.server else None
        metrics_before = await _scrape_metrics(client, self._metrics_url()) if self._scrapes_engine(engine) else None
        interrupted = False
        warnings: list[RunWarning] = []
        energy = self._energy_meter()
        if energy is not None:
            await energy.start()
        cpu = CpuMeter()
        try:
            await runner.run()
        except asyncio.CancelledError:
            interrupted = True
        except WorkersLost as exc:
            interrupted = True
            warnings.append(RunWarning(code="workers.all_lost", message=str(exc)))
        finally:
            self.client_cpu_pct = cpu.pct()
            self.energy = await self._stop_energy(energy)
            for rec in runner.records:
                if rec.seq not in self._written:
                    self.store.append(rec)
            if dispatcher is not None:
                # Counted at hand-over the parent's figure would include sends still waiting for
                # their time on a worker; the records' own stamps say what was in flight.
                runner.windows.max_in_flight = peak_in_flight(runner.records)
                warnings = fault_warnings(dispatcher) + warnings
                manifest.workers = self._workers_section(reason, dispatcher.pool, dispatcher)
            resources = await monitor.stop() if monitor is not None else None
            scrapes = await self._scrapes(client, engine, metrics_before, monitor)
            ctx = self._context(runner, interrupted, resources, monitor, scrapes, t0, client.model, warnings)
            summary = build_summary(runner.records, ctx)
            manifest.finished_at = datetime.now(UTC).isoformat()
            manifest.interrupted = interrupted
            self.store.write_manifest(manifest)
            self.store.write_summary(summary)
            self.store.close()
        return summary

    async def _scrapes(
        self, client: OpenAIClient, engine: str | None, before: str | None, monitor: MonitorSession | None
    ) -> EngineScrapes | None:
        """The engine's /metrics before and after the load: our own two scrapes, else the monitor's first and last."""
        if before is not None:
            after = await _scrape_metrics(client, self._metrics_url())
            named = engine if engine in WITH_METRICS else _engine_of(before)
            if named is not None:
                return EngineScrapes(named, before, after or "")
        if monitor is not None:
            m_engine, first, last = monitor.server_metrics_texts()
            if m_engine is not None and first and last and first is not last:
                return EngineScrapes(m_engine, first, last)
        return None

    def _energy_meter(self) -> EnergyMeter | None:
        """GPU energy over the load: the DCGM exporter given, else NVML when the server is on this machine."""
        if self.s.dcgm_url is not None:
            return EnergyMeter(DcgmEnergy(self.s.dcgm_url))
        return EnergyMeter(NvmlEnergy()) if is_local_url(self.endpoint.base_url) else None

    async def _stop_energy(self, meter: EnergyMeter | None) -> EnergyWindow | None:
        if meter is None:
            return None
        window = await meter.stop()
        if self.s.dcgm_url is None and window.reason is not None:
            return None  # no NVML GPU here: nothing was asked for, nothing to report
        if self.s.dcgm_url is None:
            pids = await asyncio.to_thread(local_server_pids, self.endpoint.base_url)
            window.warnings.extend(sharing_warnings(window, pids))
        return window

    def _metrics_url(self) -> str:
        return self.s.metrics_url or f"{server_root(self.endpoint.base_url)}/metrics"

    def _scrapes_engine(self, engine: str | None) -> bool:
        """Whether to read /metrics around the load: a known engine, a given URL, or a server on this machine."""
        return engine in WITH_METRICS or self.s.metrics_url is not None or is_local_url(self.endpoint.base_url)

    def _context(
        self,
        runner: Runner,
        interrupted: bool,
        resources: Resources | None,
        monitor: MonitorSession | None,
        scrapes: EngineScrapes | None,
        t0: int,
        model: str,
        warnings: list[RunWarning] | None = None,
    ) -> RunContext:
        s = self.s
        return RunContext(
            windows=runner.windows,
            slo=s.slo,
            max_error_rate=s.max_error_rate,
            confidence=s.confidence,
            interrupted=interrupted,
            concurrency=s.load.concurrency if s.load.rate is None else max(1, runner.windows.max_in_flight),
            efficiency=s.efficiency,
            cost=s.cost,
            provider=self.endpoint.provider,
            model=model,
            resources=resources,
            timeseries=load_timeseries(monitor.directory) if monitor is not None else None,
            t0_ns=t0,
            duration_s=s.load.duration_s,
            scrapes=scrapes,
            cache_busted=self.built.busted if self.built is not None else None,
            server_cache=server_cache(scrapes.engine, scrapes.before, scrapes.after) if scrapes else None,
            warnings=tuple(warnings or ()),
            client=ClientObservation(self.client_cpu_pct, calibrated_ceiling()),
            probe_rate=s.load.probe_rate,
            response_schema=s.request.response_schema is not None,
            api=s.request.api,
            stream=s.request.stream,
            energy=self.energy,
            profile=s.profile,
        )

    def _send_checked(
        self, inner: Callable[[P, RequestRecord], Awaitable[RequestRecord]], client: OpenAIClient, models: list[str]
    ) -> Callable[[P, RequestRecord], Awaitable[RequestRecord]]:
        first = True

        async def send(prompt: P, rec: RequestRecord) -> RequestRecord:
            nonlocal first
            await inner(prompt, rec)
            if first:
                first = False
                check_first(rec, client.model, self.endpoint.key_source, models, client.url, client.api.name)
            return rec

        return send

    async def _tokenizer(self, client: OpenAIClient) -> Tokenizer | None:
        """The server's /tokenize when it answers (a local tokenizer file is read by read_inputs)."""
        assert client.session is not None
        tok = ServerTokenizer(client.session, server_root(self.endpoint.base_url), client.model, client.headers())
        return tok if await probe_server_tokenizer(tok) else None

    async def _finish(self, rec: RequestRecord, prompt: Prompt) -> None:
        if rec.error_kind != "cancelled":
            await fill_token_counts(rec, prompt.as_text(), self.tokenizer)
        assert self.store is not None
        self.store.append(rec)
        self._written.add(rec.seq)
        rec.text = ""  # counted and written; do not hold every answer in memory
        if self.progress is not None:
            self.progress(rec)

    def _manifest(
        self, client: OpenAIClient, info: Any, prompts: PromptSet, built: Built, started: str, t0: int
    ) -> Manifest:
        return Manifest(
            schema_version=SCHEMA_VERSION,
            version=__version__,
            command=self.argv,
            settings=self.s.saved(),
            endpoint=self.endpoint.base_url,
            provider=self.endpoint.provider,
            model=client.model,
            models_answer=info.models_answer,
            server_headers=info.headers,
            prompts=PromptsInfo(
                name=prompts.name, count=len(prompts.prompts), sizing=built.sizing, cache_bust=built.busted
            ),
            workload=Workload.model_validate(
                {
                    "kind": built.kind,
                    "source": built.source,
                    "cache_bust": built.busted,
                    "nonce": built.nonce,
                    "notes": list(built.notes),
                }
            ),
            tokenizer=self.tokenizer.name if self.tokenizer else None,
            arrival_clock="socket" if client.stamping else "reader",
            engine=self.s.engine,
            started_at=started,
            t0_perf_counter_ns=t0,
        )
