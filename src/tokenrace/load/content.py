"""What the model is asked to write (`--content`), at the same prompt and output lengths.

Speculative and lookup decoding make decode speed depend on the text being generated:

- natural: continue a prose passage (a draft is accepted as often as prose is predictable);
- copy: repeat a passage given in the prompt, verbatim (almost every draft is accepted; n-gram
  lookup finds every next token in the prompt);
- random: write out a string of random digits given in the prompt, drawn fresh for every request,
  so no earlier prompt or answer holds it (a draft model cannot predict it).

Every prompt of a set has about the same length in words whatever its kind (the instruction, the
material, then prose to fill), and every request asks for the same `max_tokens`. The server
decides when to stop, so equal output lengths need `ignore_eos` or `min_tokens` where the API has
them; the summary reports output tokens per kind so a difference shows. `content_prompts` is the
one entry; `Content` and `parse_content` name the kinds.
"""

from __future__ import annotations

from enum import StrEnum

import numpy as np

from tokenrace.client.openai import Prompt
from tokenrace.errors import InvalidInput
from tokenrace.load.prompts import PromptSet


class Content(StrEnum):
    NATURAL = "natural"
    COPY = "copy"
    RANDOM = "random"


KINDS: tuple[Content, ...] = tuple(Content)
WORDS_PER_TOKEN = 0.75  # English prose; the sizing is approximate and the manifest says so
DIGITS_PER_TOKEN = 2.5  # digit groups of five: most tokenizers split them into 1-3 digit pieces
DEFAULT_INPUT_TOKENS = 512

INSTRUCTIONS = {
    Content.NATURAL: "Continue the following passage in the same style. Write only the continuation.",
    Content.COPY: "Repeat the following passage verbatim, word for word from its first word, and write nothing else.",
    Content.RANDOM: "Write out the following string of digits exactly, group by group, and write nothing else.",
}

_SENTENCES = (
    "The harbour was quiet in the early morning, and the fishing boats rocked gently against the pier.",
    "A baker on the corner had already opened her shutters, and the smell of bread drifted down the street.",
    "Most of the town still slept, but the gulls had begun their long argument over the rooftops.",
    "An old man walked his dog along the sea wall, stopping now and then to look at the grey water.",
    "Rain had fallen in the night, and the cobbles shone under the last of the street lamps.",
    "By seven the first bus rattled up the hill, carrying a handful of workers to the cannery.",
    "The school bell rang at half past eight, and children ran across the square with their bags.",
    "In the market, traders stacked crates of apples and argued cheerfully about the price of onions.",
    "The clock on the town hall had been five minutes slow for as long as anyone could remember.",
    "Nobody minded much, because the ferry never left on time either.",
    "At noon the wind turned, bringing a cold edge from the north and a smell of salt and seaweed.",
    "Visitors came in summer to walk the cliff path and photograph the lighthouse at sunset.",
    "In winter the cafes closed early, and the town belonged again to the people who lived there.",
    "The library stood at the top of the hill, its windows lit long after the shops had shut.",
    "Inside, a young woman sorted returned books while the radiators ticked and hissed.",
    "She had grown up in the town, left for the city, and come back when her mother fell ill.",
    "Her days were slow now, measured in deliveries, overdue notices and the weekly reading group.",
    "The group met on Thursdays and rarely finished the book, preferring to talk about each other.",
    "One evening a stranger came in out of the rain and asked for a map of the old mine workings.",
    "He said his grandfather had worked there, and that he wanted to see where the shafts had been.",
    "She found the map in a drawer that had not been opened for years, folded into a brown envelope.",
    "Together they spread it across a table and traced the tunnels that ran beneath the streets.",
    "Some of them passed under the market, others under the church and the houses by the harbour.",
    "The stranger thanked her, promised to return the map, and walked out into the wet night.",
)


def parse_content(text: str | None) -> tuple[Content, ...]:
    """`natural`, `copy`, `random` or `all` (the three); None: no content kinds (the usual prompts)."""
    if text is None:
        return ()
    if text == "all":
        return KINDS
    try:
        return (Content(text),)
    except ValueError:
        raise InvalidInput("content", f"must be natural, copy, random or all, got {text!r}") from None


def content_prompts(
    kinds: tuple[Content, ...], input_tokens: int, output_tokens: int, count: int, seed: int | None = 0
) -> PromptSet:
    """`count` prompts of each kind, interleaved (natural, copy, random, natural, ...)."""
    if not kinds:
        raise InvalidInput("content", "names no kind of content")
    if input_tokens < 1 or output_tokens < 1:
        raise InvalidInput("input_tokens", "content prompts need positive input and output lengths")
    if Content.COPY in kinds and output_tokens > input_tokens:
        problem = f"copying needs a passage at least as long as the answer ({output_tokens} tokens), got {input_tokens}"
        raise InvalidInput("input_tokens", problem)
    rng = np.random.default_rng(seed)
    prompts = [
        _prompt(kind, input_tokens, output_tokens, rng, i * len(kinds) + j)
        for i in range(count)
        for j, kind in enumerate(kinds)
    ]
    name = f"content({'+'.join(kinds)},input_tokens={input_tokens},output_tokens={output_tokens})"
    return PromptSet(tuple(prompts), name, "approximate")


def _prompt(kind: Content, input_tokens: int, output_tokens: int, rng: np.random.Generator, index: int) -> Prompt:
    words = max(1, int(input_tokens * WORDS_PER_TOKEN))
    instruction = INSTRUCTIONS[kind]
    budget = max(1, words - len(instruction.split()))
    if kind is Content.NATURAL:
        text = f"{instruction}\n\n{_prose(rng, budget)}"
    elif kind is Content.COPY:
        passage = _prose(rng, budget)
        text = f"{instruction}\n\n{passage}"
    else:
        # Digits for the whole answer, then prose so the prompt is as long as the others.
        groups = max(1, int(output_tokens * DIGITS_PER_TOKEN / 5))
        digits = " ".join(f"{int(g):05d}" for g in rng.integers(0, 100_000, size=groups))
        # The request's own number in the string: no two requests of a run share it.
        digits = f"{index:05d} {digits}"
        filler = _prose(rng, max(0, budget - int(groups * 5 / DIGITS_PER_TOKEN * WORDS_PER_TOKEN)))
        text = f"{filler}\n\n{instruction}\n\n{digits}"
    return Prompt(text=text, max_tokens=output_tokens, label=f"content={kind}", content=str(kind))


def _prose(rng: np.random.Generator, words: int) -> str:
    """`words` words of prose: the sentences in a fresh random order on every pass through them."""
    out: list[str] = []
    while len(out) < words:
        for i in rng.permutation(len(_SENTENCES)):
            out += _SENTENCES[int(i)].split()
    return " ".join(out[:words])
