"""What does scoring one pair of answers cost: tokenrace.text_agreement's similarity by length.

The gateway's shadow mode scores every shadowed answer against the real one on its event loop, so
the cost of one score is a stall of every request the gateway is proxying at that moment. This
prints the CPU time of `agreement(a, b)` (median of repeats, in ms) for answers of N tokens a side,
two kinds of pair: near-identical (a few words changed, as two quantizations of one model answer)
and unrelated (the alignment's worst case in practice). The gateway's SCORE_TOKENS is chosen from
this table.

    python benchmarks/agreement_cost.py
    python benchmarks/agreement_cost.py --tokens 256,512,1024 --repeats 20
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import statistics
import time

from tokenrace.gateway.shadow import SCORE_TOKENS
from tokenrace.text_agreement import agreement

WORDS = [f"w{i}" for i in range(2000)]  # a vocabulary of ordinary size for one answer's words


def answer(rng: random.Random, n: int) -> list[str]:
    """n tokens: words with a punctuation mark now and then (each a token of its own)."""
    out: list[str] = []
    while len(out) < n:
        out.append(rng.choice(WORDS))
        if rng.random() < 0.1:
            out.append(rng.choice(".,;:"))
    return out[:n]


def cost_ms(a: str, b: str, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t = time.process_time_ns()
        agreement(a, b)
        times.append((time.process_time_ns() - t) / 1e6)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", default="128,512,2000,8000", help="answer lengths, tokens a side")
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args()
    print(
        f"{platform.python_implementation()} {platform.python_version()}, {os.cpu_count()} CPUs, load {os.getloadavg()}"
    )
    print(f"gateway SCORE_TOKENS = {SCORE_TOKENS}")
    print(f"{'tokens a side':>14} {'near-identical ms':>18} {'unrelated ms':>13}")
    rng = random.Random(0)
    for n in (int(x) for x in args.tokens.split(",")):
        a = answer(rng, n)
        near = list(a)
        for i in rng.sample(range(n), max(1, n // 50)):  # 2 % of the tokens changed
            near[i] = rng.choice(WORDS)
        other = answer(rng, n)
        ta, tn, to = " ".join(a), " ".join(near), " ".join(other)
        print(f"{n:>14} {cost_ms(ta, tn, args.repeats):>18.2f} {cost_ms(ta, to, args.repeats):>13.2f}")


if __name__ == "__main__":
    main()
