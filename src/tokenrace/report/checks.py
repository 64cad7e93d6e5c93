"""One check of an objective as a table cell, for the claim's conditions and the SLA search's steps
alike: the outcome's mark (✓ held, ✗ failed, ? unproven), the figure, its one-sided bounds ("no
bound" where the requests cannot bound that side) and, when undecided, the requests it had and would
need (docs/claim.md, "Three outcomes")."""

from __future__ import annotations

from tokenrace.model.claim import ConditionCheck
from tokenrace.table import Cell, Tone, fmt

OPEN = "no bound"
MARKS = {"held": "✓ ", "failed": "✗ ", "unproven": "? "}
TONES: dict[str, Tone] = {"held": "good", "failed": "bad", "unproven": "warn"}


def check_cell(k: ConditionCheck | None) -> Cell:
    """ "✓ 412.0 [395.1, 431.7]", "? 41.9 [41.8, no bound] n=10, 299 needed"."""
    if k is None or k.value is None:
        return Cell(None)
    digits = 3 if k.name in ("error_rate", "goodput") or "@" in k.name else 1
    bounds = ""
    if k.ci_low is not None or k.ci_high is not None or (k.requests or 0) > 1:
        bounds = f" [{_bound(k.ci_low, digits)}, {_bound(k.ci_high, digits)}]"
    # A check saved before outcomes existed: decided when it was clear, by its figure.
    outcome = k.outcome or ("unproven" if not k.clear else "held" if k.held else "failed")
    if outcome == "unproven":
        bounds += f" n={k.requests}" if k.requests else ""
        bounds += f", {k.needed} needed" if k.needed is not None else ""
    return Cell(k.value, digits, prefix=MARKS[outcome], suffix=bounds, tone=TONES[outcome])


def _bound(v: float | None, digits: int) -> str:
    return OPEN if v is None else fmt(v, digits)
