"""Did the client limit this run? Its own load against this machine's calibration, and its CPU.

`tokenrace calibrate` finds the most content chunks/s and streams this machine's client keeps with
its timing bias under 1 ms (load/calibration.py). A run past either, or whose client process used 90 %
of a core or more, is `client_bound`: its latencies may hold the client's own lateness. With no
calibration the ceiling is unknown and `client_bound` is null, unless the CPU alone says so.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tokenrace.load.calibration import ClientCeiling
from tokenrace.model.records import RequestRecord
from tokenrace.model.summary import ClientLoad, RunWarning

CPU_LIMIT_PCT = 90.0
HOW_TO_CALIBRATE = (
    "no client calibration on this machine yet: run `tokenrace calibrate` (under a minute) so that every "
    "run can say whether the client limited it"
)


@dataclass(frozen=True, slots=True)
class ClientObservation:
    """What the run saw of its own client: its process's CPU and the machine's ceiling, if calibrated."""

    cpu_pct: float | None  # the client process's CPU over the load, % of one core
    ceiling: ClientCeiling | None  # None: never calibrated


def client_load(
    ok: Sequence[RequestRecord], window_s: float | None, streams: int, seen: ClientObservation
) -> ClientLoad:
    """The `client_load` section: the run's content chunks/s, streams and CPU beside the ceiling."""
    chunks = sum(len(r.chunk_ns) for r in ok)
    chunks_per_s = round(chunks / window_s, 1) if window_s else None
    causes = _causes(chunks_per_s, streams, seen)
    ceiling = seen.ceiling
    bound = True if causes else (False if ceiling is not None else None)
    return ClientLoad(
        client_bound=bound,
        chunks_per_s=chunks_per_s,
        streams=streams,
        cpu_pct=seen.cpu_pct,
        calibrated=ceiling is not None,
        ceiling_chunks_per_s=ceiling.chunks_per_s if ceiling else None,
        ceiling_streams=ceiling.streams if ceiling else None,
        calibrated_at=ceiling.calibrated_at if ceiling else None,
        causes=causes,
    )


def _causes(chunks_per_s: float | None, streams: int, seen: ClientObservation) -> list[str]:
    out = []
    if seen.cpu_pct is not None and seen.cpu_pct >= CPU_LIMIT_PCT:
        out.append(f"the client process used {seen.cpu_pct:.0f} % of a core (the limit is {CPU_LIMIT_PCT:.0f} %)")
    c = seen.ceiling
    if c is None:
        return out
    if c.chunks_per_s is None or c.streams is None:
        out.append("this machine's calibration found no load at which the client's bias stays under 1 ms")
        return out
    if chunks_per_s is not None and chunks_per_s > c.chunks_per_s:
        out.append(f"{chunks_per_s:,.0f} content chunks/s is past the calibrated ceiling of {c.chunks_per_s:,.0f}")
    if streams > c.streams:
        out.append(f"{streams} streams is past the calibrated ceiling of {c.streams}")
    return out


def client_warning(section: ClientLoad | None) -> RunWarning | None:
    if section is None or not section.client_bound:
        return None
    return RunWarning(
        code="client.bound",
        message="the client may have limited this run, so its latencies may include the client's own lateness: "
        + "; ".join(section.causes)
        + " (tokenrace calibrate measures this machine's ceiling)",
        figures={
            "chunks_per_s": section.chunks_per_s,
            "streams": section.streams,
            "cpu_pct": section.cpu_pct,
            "ceiling_chunks_per_s": section.ceiling_chunks_per_s,
            "ceiling_streams": section.ceiling_streams,
        },
    )
