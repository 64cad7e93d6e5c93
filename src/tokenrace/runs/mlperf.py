"""`tokenrace mlperf`: a bench session whose load is MLCommons' LoadGen.

Everything but the schedule is the bench session's: the preflight, the client and its socket
stamps, records.jsonl, summary.json and manifest.json. LoadGen's own logs are written into the
same run directory, so `show`, `report` and `compare` read the run as any other.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from tokenrace.client.openai import OpenAIClient
from tokenrace.client.request import GENERATING_APIS
from tokenrace.errors import InvalidInput
from tokenrace.figures.mlperf import Agreement, EarlyStop, LoadgenResult, agreement, early_stops, read_loadgen
from tokenrace.load.mlperf import PERCENTILE, LoadgenRunner, MlperfSpec, loadgen
from tokenrace.load.workers import Dispatcher
from tokenrace.load.workload import Built, Prompts
from tokenrace.model.records import RequestRecord
from tokenrace.runs.run import Run
from tokenrace.runs.session import BenchSession, Progress
from tokenrace.runs.settings import BenchSettings

SERVER_POOL = 1024  # connections the client may hold open in the server scenario


@dataclass(frozen=True, slots=True)
class MlperfResult:
    """The run as tokenrace saved it, LoadGen's verdict from its log, and the two side by side."""

    run: Run
    spec: MlperfSpec
    loadgen: LoadgenResult | None  # None: LoadGen wrote no result (interrupted)
    agreement: list[Agreement]
    failed: int  # requests that failed; LoadGen counted each as answered when it failed
    trials: int  # LoadGen's performance runs (find-peak: several)
    padded: int = 0  # answers of fewer than 2 tokens, given to LoadGen as 2
    early_stops: list[EarlyStop] = field(default_factory=list)  # LoadGen's test by tokenrace's rule


def mlperf_settings(settings: BenchSettings, spec: MlperfSpec) -> BenchSettings:
    """The bench settings a LoadGen run records: its rate (server) or its cap (offline) as the load,
    its minimum duration as the duration; no cold request, no warm-up (LoadGen sends every query)."""
    spec.validate()
    if settings.workers is not None:
        raise InvalidInput("workers", "LoadGen hands every query to this process; it cannot spread them")
    if settings.workload.trace_file or settings.workload.sessions_file:
        raise InvalidInput("trace", "LoadGen draws independent samples; traces and sessions are not its load")
    if settings.request.api not in GENERATING_APIS:
        raise InvalidInput("api", f"LoadGen times generated tokens; the {settings.request.api} API generates none")
    if not settings.request.stream:
        raise InvalidInput("stream", "LoadGen's token latencies need a streamed answer")
    rate = spec.target_qps if spec.scenario != "offline" else None
    load = replace(
        settings.load,
        rate=rate,
        # The server scenario limits nothing in flight: the client's pool must not either (aiohttp
        # would queue what is over its size, and LoadGen would count the wait as the server's).
        concurrency=spec.max_concurrency or SERVER_POOL,
        requests=None,
        duration_s=spec.min_duration_s,
        warmup=0,
        cold=False,
        saturation_stop=False,
    )
    return replace(settings, load=load)


class MlperfSession(BenchSession):
    """A bench session whose runner is LoadGen's (`LoadgenRunner`)."""

    def __init__(
        self, settings: BenchSettings, spec: MlperfSpec, progress: Progress | None = None, argv: list[str] | None = None
    ) -> None:
        loadgen()  # a missing LoadGen is said before any connection
        super().__init__(mlperf_settings(settings, spec), progress, argv)
        self.spec = spec
        self.loadgen_runner: LoadgenRunner | None = None

    def _runner(self, client: OpenAIClient, models: list[str], built: Built, dispatcher: Dispatcher | None) -> Any:
        assert self.store is not None and dispatcher is None
        workload = built.workload
        if not isinstance(workload, Prompts):
            raise InvalidInput("prompts", "LoadGen draws independent samples: give prompts, not sessions or a trace")
        send = self._send_checked(client.send, client, models)
        n = len(workload.base.prompts)
        runner = LoadgenRunner(send, client.encode, workload, self.spec, self._finish, self.store.dir, n)
        self.loadgen_runner = runner
        return runner

    async def run_mlperf(self) -> MlperfResult:
        run = await self.run()
        runner = self.loadgen_runner
        records = runner.records if runner is not None else []
        result = read_loadgen(run.directory)
        return MlperfResult(
            run=run,
            spec=self.spec,
            loadgen=result,
            agreement=agreement(result, records) if result is not None and self._compared() else [],
            failed=sum(1 for r in records if not r.ok),
            trials=runner.trials if runner is not None else 0,
            padded=runner.padded if runner is not None else 0,
            early_stops=self._early_stops(records),
        )

    def _early_stops(self, records: list[RequestRecord]) -> list[EarlyStop]:
        spec = self.spec
        if not self._compared() or spec.ttft_ms is None or spec.tpot_ms is None:
            return []
        return early_stops(records, spec.ttft_ms, spec.tpot_ms, PERCENTILE)

    def _compared(self) -> bool:
        """Whether LoadGen's latencies are tokenrace's requests': not under find-peak (LoadGen logs its
        peak trial, tokenrace records all of them), not offline (LoadGen logs no token latencies)."""
        return not self.spec.find_peak and self.spec.scenario != "offline"
