"""The workload flags of `bench` and `sweep`: cache busting, shared prefixes, sessions, traces,
load shapes and client cancellations. Parsed into the core's WorkloadSpec and Load fields."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import click

from tokenrace.errors import UsageError
from tokenrace.load.shapes import StagesKind, parse_stages
from tokenrace.load.workload import WorkloadSpec
from tokenrace.load.workloads.images import DEFAULT_SIZES, ImageFormat, ImageSpec
from tokenrace.load.workloads.sessions import DEFAULT_SESSION_HEADER, parse_turns
from tokenrace.load.workloads.traces import DEFAULT_BLOCK_TOKENS
from tokenrace.runs.settings import BenchSettings
from tokenrace.units import parse_duration_s, parse_sizes

F = TypeVar("F", bound=Callable[..., Any])

_OPTIONS = [
    click.option(
        "--cache-bust/--no-cache-bust",
        default=None,
        help="A unique prefix per request, so the server's prefix cache cannot serve it "
        "[default: on for built-in and synthetic prompts, off for your own prompts, sessions and traces].",
    ),
    click.option(
        "--shared-prefix-tokens", type=int, help="Every request starts with one of K shared system prompts of N tokens."
    ),
    click.option("--prefix-groups", type=int, default=1, show_default=True, help="K: distinct shared prefixes."),
    click.option(
        "--turns", help="Multi-turn sessions: turns per session, N or MEAN,STD; --concurrency counts sessions."
    ),
    click.option("--think-time", help="Mean pause between a session's turns (exponential), e.g. 2s."),
    click.option(
        "--sessions",
        "sessions_file",
        type=click.Path(dir_okay=False),
        help="Replay conversations: ShareGPT JSON or JSONL with OpenAI messages (user turns sent, real answers kept).",
    ),
    click.option(
        "--skip-invalid-sessions",
        is_flag=True,
        help="With --sessions: leave out entries that are not a usable conversation (empty, assistant-first), "
        "counted in the manifest, instead of stopping at the first.",
    ),
    click.option(
        "--session-header",
        default=DEFAULT_SESSION_HEADER,
        show_default=True,
        help="Header carrying each session's id, for gateways and routers that pin sessions.",
    ),
    click.option(
        "--trace", "trace_file", type=click.Path(dir_okay=False), help="Replay a timestamped trace, open loop."
    ),
    click.option(
        "--trace-format", type=click.Choice(["mooncake", "azure", "jsonl"]), default="mooncake", show_default=True
    ),
    click.option("--trace-speed", type=float, default=1.0, show_default=True, help="2 replays twice as fast."),
    click.option(
        "--trace-block-tokens",
        type=int,
        default=DEFAULT_BLOCK_TOKENS,
        show_default=True,
        help="Mooncake: tokens per hash id block.",
    ),
    click.option("--ramp", help="Open loop: raise the rate linearly from 0 to --rate over this long (e.g. 30s)."),
    click.option("--stages", help="Piecewise load, e.g. 30s@2,60s@8,30s@2 (rates, or concurrency with --stages-kind)."),
    click.option("--stages-kind", type=click.Choice(["rate", "concurrency"]), default="rate", show_default=True),
    click.option(
        "--images", type=int, help="Images per request (generated: real PNG/JPEG files, distinct per request)."
    ),
    click.option(
        "--image-size",
        help="Generated images' size WxH, or a list to cycle through, e.g. 512x512,1024x768 [default: 512x512].",
    ),
    click.option(
        "--image-format", type=click.Choice(["png", "jpeg"]), help="Generated images' encoding [default: png]."
    ),
    click.option(
        "--image-share",
        type=float,
        help="Share of requests that carry images, so one run holds both kinds [default: 1].",
    ),
    click.option(
        "--image-dir",
        type=click.Path(file_okay=False),
        help="Send the image files of this folder (cycled) instead of generated ones.",
    ),
    click.option(
        "--cancel-rate",
        type=float,
        default=0.0,
        show_default=True,
        help="Share of requests the client cancels mid-stream.",
    ),
    click.option(
        "--probe-rate",
        type=float,
        help="Also send light requests (one output token, a short prompt) at this rate beside the load: "
        "the TTFT a new user would meet, reported apart as `probes`.",
    ),
    click.option(
        "--saturation-stop/--no-saturation-stop",
        default=True,
        show_default=True,
        help="Open loop: stop early once the server is over-saturated (ends fall behind sends, "
        "requests in flight and TTFT keep growing).",
    ),
]


def workload_options(fn: F) -> F:
    for opt in reversed(_OPTIONS):
        fn = opt(fn)
    return fn


@dataclass(frozen=True, slots=True)
class WorkloadOptions:
    """The workload flags, as click parsed them (defaults: click's)."""

    cache_bust: bool | None = None
    shared_prefix_tokens: int | None = None
    prefix_groups: int = 1
    turns: str | None = None
    think_time: str | None = None
    sessions_file: str | None = None
    skip_invalid_sessions: bool = False
    session_header: str | None = DEFAULT_SESSION_HEADER
    trace_file: str | None = None
    trace_format: str = "mooncake"
    trace_speed: float = 1.0
    trace_block_tokens: int = DEFAULT_BLOCK_TOKENS
    ramp: str | None = None
    stages: str | None = None
    stages_kind: StagesKind = "rate"
    images: int | None = None
    image_size: str | None = None
    image_format: ImageFormat | None = None
    image_share: float | None = None
    image_dir: str | None = None
    cancel_rate: float = 0.0
    probe_rate: float | None = None
    saturation_stop: bool = True


def apply_workload_options(
    settings: BenchSettings, o: WorkloadOptions, requests: int | None, duration: str | None
) -> BenchSettings:
    """The settings with the workload flags applied (all parsed here, before any network call).
    `requests` and `duration`: --requests and --duration as given (None: not given)."""
    if o.skip_invalid_sessions and not o.sessions_file:
        raise UsageError("--skip-invalid-sessions applies to a --sessions file; none was given")
    turns = parse_turns(o.turns) if o.turns else None
    think = parse_duration_s(o.think_time, "--think-time") or 0.0
    stages = parse_stages(o.stages, o.stages_kind) if o.stages else None
    ramp = parse_duration_s(o.ramp, "--ramp")
    workload = WorkloadSpec(
        cache_bust=o.cache_bust,
        shared_prefix_tokens=o.shared_prefix_tokens,
        prefix_groups=o.prefix_groups,
        turns=turns,
        think_time_s=think,
        sessions_file=o.sessions_file,
        skip_invalid_sessions=o.skip_invalid_sessions,
        session_header=o.session_header or None,
        trace_file=o.trace_file,
        trace_format=o.trace_format,
        trace_speed=o.trace_speed,
        trace_block_tokens=o.trace_block_tokens,
        images=_image_spec(o),
    )
    load = dataclasses.replace(
        settings.load,
        ramp_s=ramp,
        stages=stages,
        stages_kind=o.stages_kind,
        cancel_rate=o.cancel_rate,
        probe_rate=o.probe_rate,
        saturation_stop=o.saturation_stop,
    )
    if (workload.trace_file or workload.sessions_file) and requests is None and not duration:
        load = dataclasses.replace(load, requests=None, duration_s=None)  # the whole file
    if stages is not None and requests is None:
        load = dataclasses.replace(load, requests=None)  # the stages say how long
    load.validate(finite=bool(workload.trace_file or workload.sessions_file))
    return dataclasses.replace(settings, workload=workload, load=load)


def _image_spec(o: WorkloadOptions) -> ImageSpec | None:
    """--images and its companions; None when the requests carry no generated or folder images."""
    if o.images is None and not o.image_dir:
        for flag in ("image_size", "image_format", "image_share"):
            if getattr(o, flag) is not None:
                raise UsageError(f"--{flag.replace('_', '-')} shapes the images of --images N (or --image-dir)")
        return None
    if o.image_dir and o.image_size:
        raise UsageError("--image-size applies to generated images; the files of --image-dir keep their own sizes")
    return ImageSpec(
        count=1 if o.images is None else o.images,  # a 0 is checked and refused, not replaced
        sizes=parse_sizes(o.image_size) if o.image_size else DEFAULT_SIZES,
        format=o.image_format or "png",
        share=1.0 if o.image_share is None else o.image_share,
        directory=o.image_dir,
    )
