"""Which settings an API can take: checked with the other inputs, before the first request.

Embeddings and rerank answer a batch in one body: nothing streams, so there is no first token,
no output to size, nothing to cancel mid-answer, no conversation to continue and no decode bound.
A setting that only means something for generated text is refused by name rather than ignored.
"""

from __future__ import annotations

from tokenrace.client.request import API_NAMES, POOLING_APIS
from tokenrace.errors import InvalidInput
from tokenrace.runs.settings import BenchSettings

# SLO figures a one-body answer has no value for (e2e is the only latency it has).
STREAM_SLOS = ("ttft", "tpot", "itl")


def check_api_fit(s: BenchSettings) -> None:
    api = s.request.api
    if api not in API_NAMES:
        raise InvalidInput("api", f"unknown API {api!r}; known: {', '.join(API_NAMES)}")
    _check_counts(s)
    if api not in POOLING_APIS:
        return
    why = f"the {api} API answers in one body, with nothing generated"
    w = s.workload
    refused = (
        ("output_tokens", s.prompts.output_tokens is not None, "sizes generated output"),
        ("sessions", w.sessions_file is not None, "replays conversations"),
        ("turns", w.turns is not None, "makes conversations"),
        ("trace", w.trace_file is not None, "replays a trace of chat requests"),
        ("shared_prefix_tokens", w.shared_prefix_tokens is not None, "prefixes chat prompts"),
        ("cache_bust", bool(w.cache_bust), "tags chat prompts (each synthetic input already starts unique)"),
        ("cancel_rate", s.load.cancel_rate > 0, "cancels streams mid-answer"),
        ("hardware", s.efficiency is not None, "sets the decode speed-of-light bound"),
    )
    for param, given, what in refused:
        if given:
            raise InvalidInput(param, f"{what}; {why}")
    stream_slos = sorted(o.figure for o in s.slo or () if o.figure in STREAM_SLOS)
    if stream_slos:
        names = ", ".join(stream_slos)
        raise InvalidInput("slo", f"{names} need a streamed answer; {why}: use e2e")


def _check_counts(s: BenchSettings) -> None:
    api, batch, documents = s.request.api, s.prompts.batch_size, s.prompts.documents
    if batch is not None and batch < 1:
        raise InvalidInput("batch_size", f"must be at least 1 input per request, got {batch}")
    if documents is not None and documents < 1:
        raise InvalidInput("documents", f"must be at least 1 document per request, got {documents}")
    if batch is not None and api != "embeddings":
        raise InvalidInput("batch_size", f"sets the inputs of each embeddings request; the API is {api}")
    if documents is not None and api != "rerank":
        raise InvalidInput("documents", f"sets the documents of each rerank request; the API is {api}")
