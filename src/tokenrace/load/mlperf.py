"""An MLPerf Inference run under MLCommons' own LoadGen (`mlcommons-loadgen`, module `mlperf_loadgen`).

LoadGen schedules and judges; tokenrace's client is the system under test. LoadGen issues a query
on its own thread; the query is handed to the event loop (thread-safe), sent by the same client
every run uses (its request built before LoadGen issued it) and stamped at the socket;
`FirstTokenComplete` is called as the first content chunk is read and `QuerySamplesComplete`, with
the output token count, as the stream ends. LoadGen's own logs (mlperf_log_summary.txt,
mlperf_log_detail.txt) are written where the run says.

The bounds (TTFT and TPOT at the 99th percentile) are MLPerf's, each row with its source; where the
rules and LoadGen's mlperf.conf disagree, none is picked silently.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, replace
from pathlib import Path
from types import ModuleType
from typing import Any, Literal

from tokenrace.client.openai import Encoded
from tokenrace.client.request import Prompt
from tokenrace.errors import InvalidInput, PreflightError
from tokenrace.load.prompts import PromptSet
from tokenrace.load.runner import Finish, quiet_gc
from tokenrace.load.windows import Windows
from tokenrace.load.workload import Prompts
from tokenrace.model.records import RequestRecord

perf_ns = time.perf_counter_ns
Scenario = Literal["server", "interactive", "offline"]
SCENARIOS: tuple[str, ...] = ("server", "interactive", "offline")
INSTALL_HINT = "mlcommons-loadgen is not installed: pip install 'tokenrace[mlperf]' (or scripts/setup.sh --tests)"

RULES = "MLPerf Inference rules, benchmark table (mlcommons/inference_policies, inference_rules.adoc)"
CONF = "LoadGen's mlperf.conf (mlcommons/inference, loadgen/mlperf.conf; compiled into mlcommons-loadgen 6.0)"

# MLPerf's minimums (the rules' scenario table; LoadGen's mlperf.conf `*.Server.min_duration`,
# `*.Offline.min_duration`, and LoadGen's default min_query_count for the server scenario).
MIN_DURATION_S = 600.0
MIN_QUERIES = 100
# Offline: one query of at least 24,576 samples, or the whole data set when it is smaller (the rules'
# scenario table); per model in mlperf.conf as `<model>.Offline.min_query_count`.
OFFLINE_MIN_SAMPLES = 24_576
# The rules' seeds, as mlperf.conf sets them for every model and scenario (`*.*.qsl_rng_seed` ...).
QSL_RNG_SEED = 2085463073848966840
SAMPLE_INDEX_RNG_SEED = 2747215439041700203
SCHEDULE_RNG_SEED = 16159082839903944936
PERCENTILE = 0.99  # *.Server.target_latency_percentile in mlperf.conf
# The samples' requests are built before the test while their bodies hold this many bytes in all;
# the rest are built as LoadGen issues them (a large set of long prompts, or of images, would
# otherwise be held twice in memory).
AHEAD_BYTES = 256 * 2**20

SendEncoded = Callable[[Encoded, RequestRecord], Awaitable[RequestRecord]]
Encode = Callable[[Prompt], Encoded]


@dataclass(frozen=True, slots=True)
class Bound:
    """One row of MLPerf's LLM latency table: TTFT and TPOT at p99, in ms, and where it comes from."""

    model: str
    scenario: Scenario
    ttft_ms: float
    tpot_ms: float
    source: str
    # What LoadGen's mlperf.conf says where it differs from the rules (None: the same).
    conf_tpot_ms: float | None = None
    conf_ttft_ms: float | None = None

    @property
    def agreed(self) -> bool:
        return self.conf_tpot_ms is None and self.conf_ttft_ms is None


BOUNDS: tuple[Bound, ...] = (
    Bound("llama2-70b", "server", 2000, 200, f"{RULES}; {CONF}"),
    Bound("llama2-70b", "interactive", 450, 40, f"{RULES}; {CONF}"),
    Bound("llama3.1-8b", "server", 2000, 100, f"{RULES}; {CONF}"),
    Bound("llama3.1-8b", "interactive", 500, 30, f"{RULES}; {CONF}"),
    Bound("llama3.1-405b", "server", 6000, 175, f"{RULES}; {CONF}"),
    Bound("llama3.1-405b", "interactive", 4500, 80, f"{RULES}; {CONF}"),
    Bound("mixtral-8x7b", "server", 2000, 200, f"{RULES}; {CONF}"),
    Bound("deepseek-r1", "server", 2000, 80, f"{RULES}; {CONF}"),
    Bound("deepseek-r1", "interactive", 1500, 15, f"{RULES}; {CONF}"),
    Bound("gpt-oss-120b", "server", 3000, 80, f"{RULES}; {CONF}"),
    Bound("gpt-oss-120b", "interactive", 2000, 20, RULES, conf_tpot_ms=15),
)
BOUND_MODELS: tuple[str, ...] = tuple(dict.fromkeys(b.model for b in BOUNDS))
# mlperf.conf's `<model>.Offline.min_query_count` for the LLMs the table lists (the data set's size
# where it is under 24,576); a model it does not list takes the rules' 24,576.
OFFLINE_SAMPLES: dict[str, int] = {
    "llama2-70b": 24_576,
    "llama3.1-8b": 13_368,
    "llama3.1-405b": 8_313,
    "mixtral-8x7b": 15_000,
    "deepseek-r1": 4_388,
    "gpt-oss-120b": 6_396,  # mlperf.conf lists none; the rules' data set size (its performance sample count)
}


def bound_for(model: str, scenario: Scenario) -> Bound:
    """The table's row for `model` in `scenario` (server or interactive)."""
    rows = [b for b in BOUNDS if b.model == model]
    if not rows:
        raise InvalidInput("bounds", f"unknown model {model!r}; MLPerf's table lists {', '.join(BOUND_MODELS)}")
    for b in rows:
        if b.scenario == scenario:
            return b
    have = ", ".join(b.scenario for b in rows)
    raise InvalidInput("bounds", f"MLPerf sets no {scenario} bounds for {model} (it has: {have})")


def resolve_bounds(
    model: str | None, scenario: Scenario, ttft_ms: float | None, tpot_ms: float | None
) -> tuple[float | None, float | None, Bound | None]:
    """(TTFT ms, TPOT ms, the table's row) from --bounds and/or --ttft/--tpot; a bound given
    directly wins over the table's. Offline has no latency bound."""
    for name, value in (("ttft", ttft_ms), ("tpot", tpot_ms)):
        if value is not None and not (value > 0 and math.isfinite(value)):
            raise InvalidInput(name, f"must be a positive number of milliseconds, got {value}")
    if scenario == "offline":
        if ttft_ms is not None or tpot_ms is not None:
            raise InvalidInput("ttft" if ttft_ms is not None else "tpot", "the offline scenario has no latency bound")
        if model is not None and model not in BOUND_MODELS:
            raise InvalidInput("bounds", f"unknown model {model!r}; MLPerf's table lists {', '.join(BOUND_MODELS)}")
        return None, None, None
    row = bound_for(model, scenario) if model is not None else None
    if row is not None and not row.agreed:
        if row.conf_tpot_ms is not None and tpot_ms is None:
            raise InvalidInput(
                "tpot",
                f"{row.model} {row.scenario}: the rules say TPOT {row.tpot_ms:g} ms, LoadGen's mlperf.conf "
                f"{row.conf_tpot_ms:g} ms; give the one to hold",
            )
        if row.conf_ttft_ms is not None and ttft_ms is None:
            raise InvalidInput(
                "ttft",
                f"{row.model} {row.scenario}: the rules say TTFT {row.ttft_ms:g} ms, LoadGen's mlperf.conf "
                f"{row.conf_ttft_ms:g} ms; give the one to hold",
            )
    ttft = ttft_ms if ttft_ms is not None else (row.ttft_ms if row else None)
    tpot = tpot_ms if tpot_ms is not None else (row.tpot_ms if row else None)
    if ttft is None or tpot is None:
        missing = "ttft" if ttft is None else "tpot"
        raise InvalidInput(
            missing,
            f"the {scenario} scenario needs a bound: a model's from MLPerf's table, or TTFT and TPOT of your own",
        )
    return ttft, tpot, row


@dataclass(frozen=True, slots=True)
class MlperfSpec:
    """One LoadGen test: its scenario, bounds, rate and minimums."""

    scenario: Scenario
    ttft_ms: float | None = None  # p99 bound (server, interactive)
    tpot_ms: float | None = None
    target_qps: float | None = None  # server: the Poisson rate; offline: the expected rate
    find_peak: bool = False  # LoadGen's FindPeakPerformance mode, from target_qps (or 1) upwards
    min_duration_s: float = MIN_DURATION_S
    min_queries: int = MIN_QUERIES  # offline: samples in its one query
    max_concurrency: int | None = None  # requests in flight at most (offline: the client's pool)
    bounds_model: str | None = None  # the table's row, when --bounds named one

    @property
    def comparable(self) -> bool:
        """Whether the run meets MLPerf's minimum duration (else: not comparable with published results)."""
        return self.min_duration_s >= MIN_DURATION_S

    def validate(self) -> None:
        if self.target_qps is not None and not (self.target_qps > 0 and math.isfinite(self.target_qps)):
            raise InvalidInput("target_qps", f"must be a positive number of queries/s, got {self.target_qps}")
        if self.scenario != "offline" and self.target_qps is None and not self.find_peak:
            raise InvalidInput(
                "target_qps", f"the {self.scenario} scenario needs a rate (or a peak search from 1 query/s)"
            )
        if self.find_peak and self.scenario == "offline":
            raise InvalidInput("find_peak", "LoadGen searches a peak rate in the server scenario only")
        if self.min_queries < 1:
            raise ValueError(f"min_queries must be at least 1, got {self.min_queries}")
        if self.max_concurrency is not None and self.max_concurrency < 1:
            raise InvalidInput("max_concurrency", "must be at least 1")


def default_min_queries(scenario: Scenario, model: str | None, shortened: bool) -> int:
    """MLPerf's minimum: 100 queries (server, interactive); offline the model's sample count
    (24,576 at most). A shortened run (--duration) of the offline scenario takes 100 too."""
    if scenario != "offline" or shortened:
        return MIN_QUERIES
    return OFFLINE_SAMPLES.get(model or "", OFFLINE_MIN_SAMPLES)


def loadgen() -> ModuleType:
    """The LoadGen bindings, or a one-line error saying how to install them."""
    try:
        import mlperf_loadgen  # noqa: PLC0415 - optional dependency: the [mlperf] extra
    except ImportError:
        raise PreflightError(INSTALL_HINT) from None
    module: ModuleType = mlperf_loadgen
    return module


def loadgen_settings(lg: ModuleType, spec: MlperfSpec) -> Any:
    """LoadGen's TestSettings for `spec`, set field by field (the values mlperf.conf gives the LLMs)."""
    s = lg.TestSettings()
    s.scenario = lg.TestScenario.Offline if spec.scenario == "offline" else lg.TestScenario.Server
    s.mode = lg.TestMode.FindPeakPerformance if spec.find_peak else lg.TestMode.PerformanceOnly
    s.min_duration_ms = int(spec.min_duration_s * 1000)
    s.min_query_count = spec.min_queries
    s.qsl_rng_seed = QSL_RNG_SEED
    s.sample_index_rng_seed = SAMPLE_INDEX_RNG_SEED
    s.schedule_rng_seed = SCHEDULE_RNG_SEED
    s.use_token_latencies = True
    s.sample_concatenate_permutation = True  # the LLMs' equal-issue mode (mlperf.conf)
    if spec.scenario == "offline":
        s.offline_expected_qps = spec.target_qps or 1.0
        return s
    assert spec.ttft_ms is not None and spec.tpot_ms is not None
    s.server_target_qps = spec.target_qps or 1.0
    s.server_target_latency_ns = 0  # judged by TTFT and TPOT only (mlperf.conf: target_latency = 0)
    s.server_target_latency_percentile = PERCENTILE
    s.ttft_latency = int(spec.ttft_ms * 1e6)
    s.tpot_latency = int(spec.tpot_ms * 1e6)
    return s


def log_settings(lg: ModuleType, directory: Path) -> Any:
    ls = lg.LogSettings()
    ls.log_output.outdir = str(directory)
    ls.log_output.prefix = "mlperf_log_"
    ls.enable_trace = False  # the trace is large and tokenrace's records.jsonl holds every request
    return ls


def output_tokens_now(rec: RequestRecord) -> int:
    """The output tokens known as the stream ends: the server's usage, else the content chunks."""
    return rec.output_tokens if rec.output_tokens is not None else len(rec.chunk_ns)


def tokens_for_loadgen(n: int) -> int:
    """The count LoadGen is given. It needs 2 or more (TPOT divides by tokens - 1; with fewer it logs
    an error and divides by -1): an answer of 0 or 1 token, usually a failed request, is given as 2."""
    return max(n, 2)


@dataclass(slots=True)
class Ready:
    """A sample's next request, built before LoadGen issues it: its prompt, encoded, and its record
    (numbered and given its hand-over time at issue)."""

    index: int
    encoded: Encoded
    record: RequestRecord


class LoadgenRunner:
    """A runner for BenchSession whose schedule is LoadGen's (same `run`, `records`, `windows`).

    LoadGen's TTFT starts at the query's scheduled time, so whatever the client does between the
    hand-over and the socket counts as the server's. Each sample's request is therefore built (prompt,
    JSON body, headers, record) before the test starts, and its next one as soon as its first token
    is in; a sample issued again before then is built at issue. On a shared 2-vCPU machine building
    one took 0.38 ms (median) at issue, its code and data gone cold in the ~0.1 s between queries,
    against 18 us back to back.
    """

    def __init__(
        self,
        send: SendEncoded,
        encode: Encode,
        workload: Prompts,
        spec: MlperfSpec,
        finish: Finish,
        log_dir: Path,
        sample_count: int,
    ) -> None:
        spec.validate()
        self.send = send
        self.encode = encode
        self.workload = workload
        self.spec = spec
        self.finish = finish
        self.log_dir = log_dir
        self.sample_count = max(1, sample_count)
        self.records: list[RequestRecord] = []
        self.windows = Windows()
        self.trials = 0  # LoadGen's performance runs (find-peak runs several; each ends with a flush)
        self.padded = 0  # answers of fewer than 2 tokens, given to LoadGen as 2 (tokens_for_loadgen)
        self._seq = 0
        self._draws = 0  # requests built: each built one is made its own by this number (see `_build`)
        self._ready: dict[int, Ready] = {}  # sample index -> its next request, built ahead
        self._ahead = 0  # samples 0 .. _ahead - 1 have their requests built ahead (AHEAD_BYTES)
        self._in_flight = 0
        self._tasks: set[asyncio.Task[None]] = set()
        self._cap = asyncio.Semaphore(spec.max_concurrency) if spec.max_concurrency else None
        self._lg: ModuleType | None = None
        self._stopping = False

    async def run(self) -> list[RequestRecord]:
        lg = self._lg = loadgen()
        loop = asyncio.get_running_loop()
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self._build_ahead()

        def issue(samples: Any) -> None:  # LoadGen's thread
            issued = perf_ns()
            items = [(s.id, s.index) for s in samples]
            if self._stopping:
                _answer_now(lg, items)
                return
            try:
                loop.call_soon_threadsafe(self._issue, items, issued)
            except RuntimeError:  # the loop has closed (interrupted): an exception here would abort LoadGen
                _answer_now(lg, items)

        def flush() -> None:  # LoadGen's thread: a performance run has issued its last query
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(self._flushed)

        sut = lg.ConstructSUT(issue, flush)
        qsl = lg.ConstructQSL(self.sample_count, self.sample_count, _noop, _noop)
        done: asyncio.Future[None] = loop.create_future()
        # Never found, so a stray audit.config in the working directory cannot change the test.
        audit = str(self.log_dir / "no-audit.config")
        settings, logs = loadgen_settings(lg, self.spec), log_settings(lg, self.log_dir)

        def test() -> None:
            try:
                lg.StartTestWithLogSettings(sut, qsl, settings, logs, audit)
            finally:
                with contextlib.suppress(RuntimeError):  # the loop has closed (interrupted)
                    loop.call_soon_threadsafe(_settle, done)

        # A daemon thread rather than the loop's executor: after Ctrl-C the process must not wait
        # for LoadGen's schedule to run out.
        thread = threading.Thread(target=test, name="loadgen", daemon=True)
        with quiet_gc():
            thread.start()
            try:
                await asyncio.shield(done)
            except asyncio.CancelledError:
                self._abandon()
                raise
            if self._tasks:
                await asyncio.gather(*self._tasks)
        lg.DestroyQSL(qsl)
        lg.DestroySUT(sut)
        self.windows.steady_end_ns = self.windows.steady_end_ns or perf_ns()
        return self.records

    def _issue(self, items: list[tuple[int, int]], issued_ns: int) -> None:
        if self.windows.steady_start_ns is None:
            self.windows.steady_start_ns = issued_ns
            # A peak search changes its rate trial by trial; offline has none.
            steady = self.spec.scenario != "offline" and not self.spec.find_peak
            self.windows.offered_rate = self.spec.target_qps if steady else None
        for sample_id, index in items:
            ready = self._ready.pop(index, None) or self._build(index)
            rec = ready.record
            rec.seq = self._seq
            rec.intended_start_ns = issued_ns
            self._seq += 1
            task = _start(self._one(sample_id, ready))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    def _flushed(self) -> None:
        self.trials += 1
        self.windows.steady_end_ns = perf_ns()

    async def _one(self, sample_id: int, ready: Ready) -> None:
        lg = self._lg
        assert lg is not None
        rec, encoded = ready.record, ready.encoded
        first_done = False

        def first_token(_t: int) -> None:
            nonlocal first_done
            first_done = True
            lg.FirstTokenComplete([lg.QuerySampleResponse(sample_id, 0, 0)])
            if ready.index < self._ahead and not self._stopping:
                # The sample's next request, built after this stream's chunk is handled.
                asyncio.get_running_loop().call_soon(self._refill, ready.index)

        rec.on_first_token = first_token
        cap = self._cap if self._cap is not None else contextlib.nullcontext()
        try:
            async with cap:
                self._in_flight += 1
                self.windows.max_in_flight = max(self.windows.max_in_flight, self._in_flight)
                try:
                    await self.send(encoded, rec)
                finally:
                    self._in_flight -= 1
        finally:
            rec.on_first_token = None
            # LoadGen waits for every sample: a failed request is answered too, at the moment it failed.
            n = output_tokens_now(rec)
            if not first_done:
                lg.FirstTokenComplete([lg.QuerySampleResponse(sample_id, 0, 0)])
            lg.QuerySamplesComplete([lg.QuerySampleResponse(sample_id, 0, 0, tokens_for_loadgen(n))])
            self.padded += n < 2
            self.records.append(rec)
        await self.finish(rec, encoded.prompt)

    def _build_ahead(self) -> None:
        size = 0
        for index in range(self.sample_count):
            ready = self._build(index)
            size += len(ready.encoded.payload)
            if size > AHEAD_BYTES:
                return
            self._ready[index] = ready
            self._ahead = index + 1

    def _refill(self, index: int) -> None:
        if index not in self._ready:
            self._ready[index] = self._build(index)

    def _build(self, index: int) -> Ready:
        """The next request of sample `index`, made its own by the number of requests built so far
        (its cache-busting tag, shared prefix group and images), as every request of a run is made
        its own by its number: a sample LoadGen draws twice is not served from the prefix cache the
        second time. Every request built is numbered once, so no two requests share a tag."""
        draw = self._draws
        self._draws += 1
        w = self.workload
        prompt = replace(w, base=PromptSet((w.base.pick(index),), w.base.name)).pick(draw)
        # seq is the record's number among those LoadGen issued: set at issue.
        rec = RequestRecord(seq=-1, phase="measure", content=prompt.content)
        return Ready(index, self.encode(prompt), rec)

    def _abandon(self) -> None:
        """Interrupted: cancel the sends in flight (each answers LoadGen as it ends); LoadGen's
        schedule goes on in its thread, and what it issues from now on is answered at once."""
        self._stopping = True
        for t in self._tasks:
            t.cancel()


def _answer_now(lg: ModuleType, items: list[tuple[int, int]]) -> None:
    """Complete queries without sending them (the run was interrupted), so that LoadGen can end."""
    for sample_id, _index in items:
        lg.FirstTokenComplete([lg.QuerySampleResponse(sample_id, 0, 0)])
        lg.QuerySamplesComplete([lg.QuerySampleResponse(sample_id, 0, 0, tokens_for_loadgen(0))])


def _start(coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
    """The task of one query. From Python 3.12 it starts at once (eagerly), in the hand-over's own
    callback, rather than a turn of the event loop later."""
    if sys.version_info >= (3, 12):
        return asyncio.Task(coro, loop=asyncio.get_running_loop(), eager_start=True)
    return asyncio.ensure_future(coro)


def _noop(_samples: Any) -> None:
    """The QSL's load and unload: the prompts are in memory already."""


def _settle(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)
