"""Cost beside speed: $ per million output tokens and per thousand requests, for a hosted API
(its token prices) or a self-hosted backend (GPU-hours at the measured throughput).

Figures are defined in docs/metrics.md (Cost). Undefined figures are None, never 0.
"""

from __future__ import annotations

import tomllib
from dataclasses import asdict, dataclass
from importlib import resources

from pydantic import BaseModel, TypeAdapter, ValidationError

from tokenrace.errors import InvalidInput, UsageError
from tokenrace.model.stats import Stats
from tokenrace.model.summary import Cost, GpuBasis, PriceBasis, Summary
from tokenrace.paths import home
from tokenrace.units import parse_price_per_m

PRICE_FILE = "prices.toml"


@dataclass(frozen=True, slots=True)
class Price:
    """A hosted API's price, US$ per million tokens."""

    input_per_m: float
    output_per_m: float
    source: str = "--price"
    date: str | None = None


@dataclass(frozen=True, slots=True)
class GpuCost:
    usd_per_gpu_hour: float
    gpus: int = 1


@dataclass(frozen=True, slots=True)
class CostSpec:
    price: Price | None = None
    gpu: GpuCost | None = None


def spec(price: str | None, gpu_hour_cost: float | None, gpus: int | None) -> CostSpec | None:
    if price and gpu_hour_cost is not None:
        raise InvalidInput(
            "price", "a price per token is for a hosted API, a GPU-hour cost for your own GPUs: give one"
        )
    if gpu_hour_cost is not None:
        if gpu_hour_cost < 0:
            raise InvalidInput("gpu_hour_cost", f"must not be negative, got {gpu_hour_cost}")
        if (gpus or 1) < 1:
            raise InvalidInput("gpus", f"must be at least 1, got {gpus}")
        return CostSpec(gpu=GpuCost(gpu_hour_cost, gpus or 1))
    if gpus not in (None, 1):
        raise InvalidInput("gpus", "counts the GPUs a GPU-hour cost is paid for: give that cost too")
    return CostSpec(price=Price(*parse_price_per_m(price))) if price else None


# --- the price table -------------------------------------------------------------------------------


class PriceRow(BaseModel):
    """One `[[price]]` of a price table, as written in prices.toml."""

    provider: str
    model: str
    input: float  # US$ per million prompt tokens
    output: float  # US$ per million output tokens
    source: str | None = None
    date: str | None = None

    @property
    def price(self) -> Price:
        return Price(self.input, self.output, self.source or "price table", self.date)


PRICE_ROWS = TypeAdapter(list[PriceRow])


def _table_entries(text: str, where: str) -> list[PriceRow]:
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"{where}: not valid TOML ({exc})") from None
    try:
        return PRICE_ROWS.validate_python(doc.get("price", []))
    except ValidationError:
        raise UsageError(f"{where}: every [[price]] needs provider, model, input and output") from None


def price_table() -> list[PriceRow]:
    """The packaged table, with $TOKENRACE_HOME/prices.toml entries first (they win)."""

    packaged = _table_entries(resources.files("tokenrace.figures").joinpath(PRICE_FILE).read_text(), PRICE_FILE)
    user_file = home() / PRICE_FILE
    user = _table_entries(user_file.read_text(), str(user_file)) if user_file.is_file() else []
    return user + packaged


def lookup(provider: str | None, model: str | None) -> Price | None:
    if not provider or not model:
        return None
    for e in price_table():
        if e.provider.lower() == provider.lower() and e.model.lower() == model.lower():
            return e.price
    return None


# --- figures ---------------------------------------------------------------------------------------


def _total(m: Stats) -> float | None:
    # Token counts are whole numbers; the mean is stored rounded, so round the product back.
    return None if not m.count or m.mean is None else float(round(m.mean * m.count))


def api_cost(summary: Summary, price: Price) -> Cost:
    ok = summary.requests.succeeded
    prompt, output = _total(summary.metrics.prompt_tokens), _total(summary.metrics.output_tokens)
    usd = None if prompt is None or output is None else (prompt * price.input_per_m + output * price.output_per_m) / 1e6
    return Cost(
        basis="api",
        price=PriceBasis(**asdict(price)),
        usd_total=_round(usd),
        usd_per_million_output_tokens=_round(usd / output * 1e6 if usd is not None and output else None),
        usd_per_1k_requests=_round(usd / ok * 1000 if usd is not None and ok else None),
    )


def gpu_cost(summary: Summary, gpu: GpuCost) -> Cost:
    per_hour = gpu.usd_per_gpu_hour * gpu.gpus
    tok_s = summary.throughput.output_tokens_per_s
    req_s = summary.throughput.requests_per_s
    return Cost(
        basis="gpu",
        gpu=GpuBasis(**asdict(gpu)),
        usd_per_hour=_round(per_hour),
        usd_per_million_output_tokens=_round(per_hour / (tok_s * 3600) * 1e6 if tok_s else None),
        usd_per_1k_requests=_round(per_hour / (req_s * 3600) * 1000 if req_s else None),
    )


def _round(v: float | None) -> float | None:
    return None if v is None else round(v, 6)


def cost_of(summary: Summary, provider: str | None, model: str | None, cost: CostSpec | None) -> Cost | None:
    """The run's cost: from the flags, else what the run saved, else the price table for its provider."""
    if cost is not None and cost.gpu is not None:
        return gpu_cost(summary, cost.gpu)
    if cost is not None and cost.price is not None:
        return api_cost(summary, cost.price)
    if summary.cost is not None:
        return summary.cost
    found = lookup(provider, model)
    return api_cost(summary, found) if found else None
