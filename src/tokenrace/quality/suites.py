"""Suites: the items a quality run asks, built-in (generated from a seed) or from a JSONL file.

Item i of a built-in suite depends only on (suite, seed, i), so any size can be made offline, the
first N items are the same whatever N is, and two runs with the same seed ask the same questions.
"""

from __future__ import annotations

import json
import random
import re
import string
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, JsonValue

from tokenrace.errors import InvalidInput, UsageError
from tokenrace.quality.checkers import (
    AnswerCheck,
    Check,
    ExactCheck,
    JsonSchemaCheck,
    LinesCheck,
    ListCheck,
    NumberCheck,
    RegexCheck,
    check_schema,
)


class Item(BaseModel):
    model_config = ConfigDict(frozen=True)

    id: str
    suite: str
    prompt: str
    check: Check
    max_tokens: int = Field(default=64, ge=1)


NUMBER_ONLY = "Reply with the number only."
NAMES = ["Ana", "Ben", "Chen", "Dara", "Emil", "Fatima", "Goran", "Hana", "Ivan", "Julia", "Kofi", "Lena"]
OBJECTS = ["apples", "marbles", "stamps", "pencils", "cards", "shells", "coins", "stickers"]
CITIES = ["Porto", "Lyon", "Bergen", "Krakow", "Osaka", "Quito", "Durban", "Tampere", "Leipzig", "Perth"]
SURNAMES = ["Lopez", "Novak", "Okafor", "Berg", "Sato", "Moreau", "Silva", "Kowalski", "Haddad", "Larsen"]
TOPICS = ["fruit", "colour", "animal", "country", "tool", "musical instrument"]
COPY_ALPHABET = string.ascii_letters + string.digits  # no quotes or spaces: the checker may peel quotes


def _has_carry(a: int, b: int) -> bool:
    while a or b:
        if a % 10 + b % 10 >= 10:
            return True
        a, b = a // 10, b // 10
    return False


def _has_borrow(a: int, b: int) -> bool:
    while b:
        if a % 10 < b % 10:
            return True
        a, b = a // 10, b // 10
    return False


def arithmetic(rng: random.Random) -> tuple[str, NumberCheck, int]:
    """Addition with a carry, subtraction with a borrow, or a 2-digit by 1- or 2-digit product."""
    op = rng.choice(["+", "-", "*"])
    while True:
        if op == "*":
            a, b = rng.randint(12, 99), rng.randint(3, 29)
            if (a % 10) * (b % 10) >= 10:  # the units product carries
                break
        else:
            a, b = rng.randint(100, 9999), rng.randint(100, 999)
            if op == "+" and _has_carry(a, b):
                break
            if op == "-" and a > b and _has_borrow(a, b):
                break
    value = a + b if op == "+" else a - b if op == "-" else a * b
    sign = {"+": "+", "-": "-", "*": "×"}[op]
    return f"What is {a} {sign} {b}? {NUMBER_ONLY}", NumberCheck(value=str(value)), 32


def word_problem(rng: random.Random) -> tuple[str, NumberCheck, int]:
    """Two or three steps of whole-number arithmetic in a short story."""
    name, obj = rng.choice(NAMES), rng.choice(OBJECTS)
    kind = rng.randrange(4)
    if kind == 0:
        a, b, c = rng.randint(12, 80), rng.randint(5, 60), rng.randint(3, 20)
        text = f"{name} has {a} {obj}, buys {b} more, then gives {c} to a friend. How many {obj} does {name} have now?"
        value = a + b - c
    elif kind == 1:
        a, b, c = rng.randint(4, 12), rng.randint(3, 9), rng.randint(1, 10)
        text = f"A box holds {a} {obj}. {name} fills {b} boxes and then loses {c} {obj}. How many {obj} are left?"
        value = a * b - c
    elif kind == 2:
        a, b, c = rng.randint(5, 30), rng.randint(3, 7), rng.randint(2, 40)
        text = f"{name} reads {a} pages a day for {b} days, then {c} pages on the last day. How many pages in total?"
        value = a * b + c
    else:
        b = rng.randint(2, 6)
        each = rng.randint(3, 15)
        extra = rng.randint(1, b - 1) if b > 1 else 0
        a = each * b + extra
        text = (
            f"{name} shares {a} {obj} equally among {b} friends and keeps the {extra} left over. "
            f"How many {obj} does each friend get?"
        )
        value = each
    return f"{text} {NUMBER_ONLY}", NumberCheck(value=str(value)), 96


def sorting(rng: random.Random) -> tuple[str, ListCheck, int]:
    values = rng.sample(range(1, 1000), rng.randint(4, 8))
    prompt = (
        f"Sort these numbers from smallest to largest: {', '.join(map(str, values))}.\n"
        "Reply with the sorted numbers only, separated by commas."
    )
    return prompt, ListCheck(items=[str(v) for v in sorted(values)]), 48


def copying(rng: random.Random) -> tuple[str, ExactCheck, int]:
    text = "".join(rng.choice(COPY_ALPHABET) for _ in range(rng.randint(8, 20)))
    return f"Repeat this string exactly, and write nothing else: {text}", ExactCheck(text=text), 32


def json_extract(rng: random.Random) -> tuple[str, JsonSchemaCheck, int]:
    name = f"{rng.choice(NAMES)} {rng.choice(SURNAMES)}"
    age, city = rng.randint(18, 90), rng.choice(CITIES)
    story = rng.choice(
        [
            f"{name} is {age} years old and lives in {city}.",
            f"Living in {city}, {name} turned {age} this year.",
            f"Our new member, {name} ({age}), joins us from {city}.",
        ]
    )
    schema: dict[str, JsonValue] = {
        "type": "object",
        "properties": {
            "name": {"type": "string", "const": name},
            "age": {"type": "integer", "const": age},
            "city": {"type": "string", "const": city},
        },
        "required": ["name", "age", "city"],
        "additionalProperties": False,
    }
    prompt = (
        "Extract the person's name, age and city from the text into a JSON object with the keys "
        '"name" (string), "age" (integer) and "city" (string). Reply with the JSON object only.\n'
        f"Text: {story}"
    )
    return prompt, JsonSchemaCheck(json_schema=schema), 64


def format_following(rng: random.Random) -> tuple[str, LinesCheck, int]:
    count, topic = rng.randint(2, 5), rng.choice(TOPICS)
    words = {2: "two", 3: "three", 4: "four", 5: "five"}[count]
    prompt = (
        f"Write exactly {words} lines. Each line names one {topic} in at most three words. "
        "Write nothing else: no title, no numbering, no blank lines."
    )
    return prompt, LinesCheck(count=count, max_words=3), 64


Generator = Callable[[random.Random], tuple[str, Any, int]]
BUILTIN: dict[str, Generator] = {
    "arithmetic": arithmetic,
    "word_problems": word_problem,
    "sorting": sorting,
    "copy": copying,
    "json_extract": json_extract,
    "format": format_following,
}


def builtin_items(suite: str, samples: int, seed: int) -> list[Item]:
    gen = BUILTIN[suite]
    out = []
    for i in range(samples):
        # A string seed is hashed by random.seed with SHA-512: stable across runs and Python versions.
        prompt, check, max_tokens = gen(random.Random(f"{suite}/{seed}/{i}"))
        out.append(Item(id=f"{suite}-{seed}-{i}", suite=suite, prompt=prompt, check=check, max_tokens=max_tokens))
    return out


_USER_KEYS = {"answer", "regex", "json_schema"}


def load_user_suite(path: Path, limit: int | None = None) -> list[Item]:
    """A JSONL file: one object per line with `prompt` and exactly one of `answer`, `regex` or
    `json_schema`; optional `id` and `max_tokens`. The suite is named after the file's stem."""
    flag = f"--suite {path}"
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise UsageError(f"{flag}: cannot read it ({exc.strerror})") from None
    suite = re.sub(r"[^A-Za-z0-9._-]+", "-", path.stem) or "user"
    items: list[Item] = []
    seen: set[str] = set()
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        item = _user_item(line, suite, len(items), f"{flag}:{lineno}")
        if item.id in seen:
            raise UsageError(f"{flag}:{lineno}: id {item.id!r} is used twice")
        seen.add(item.id)
        items.append(item)
        if limit is not None and len(items) >= limit:
            break
    if not items:
        raise UsageError(f"{flag}: no items")
    return items


def _user_item(line: str, suite: str, index: int, where: str) -> Item:
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as exc:
        raise UsageError(f"{where}: not JSON ({exc.msg})") from None
    if not isinstance(obj, dict):
        raise UsageError(f"{where}: expected a JSON object")
    unknown = set(obj) - _USER_KEYS - {"prompt", "id", "max_tokens"}
    if unknown:
        raise UsageError(f"{where}: unknown key {sorted(unknown)[0]!r}")
    prompt = obj.get("prompt")
    if not isinstance(prompt, str) or not prompt.strip():
        raise UsageError(f"{where}: `prompt` must be a non-empty string")
    keys = sorted(_USER_KEYS & set(obj))
    if len(keys) != 1:
        raise UsageError(f"{where}: give exactly one of `answer`, `regex`, `json_schema` (got {len(keys)})")
    check = _user_check(keys[0], obj[keys[0]], where)
    max_tokens = obj.get("max_tokens", 256)
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
        raise UsageError(f"{where}: `max_tokens` must be a positive integer")
    item_id = obj.get("id", f"{suite}-{index}")
    if not isinstance(item_id, (str, int)) or isinstance(item_id, bool):
        raise UsageError(f"{where}: `id` must be a string or an integer")
    return Item(id=str(item_id), suite=suite, prompt=prompt, check=check, max_tokens=max_tokens)


def _user_check(key: str, value: Any, where: str) -> AnswerCheck | RegexCheck | JsonSchemaCheck:
    if key == "answer":
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            raise UsageError(f"{where}: `answer` must be a string or a number")
        return AnswerCheck(answer=str(value))
    if key == "regex":
        if not isinstance(value, str):
            raise UsageError(f"{where}: `regex` must be a string")
        try:
            re.compile(value)
        except re.error as exc:
            raise UsageError(f"{where}: `regex` does not compile ({exc})") from None
        return RegexCheck(pattern=value)
    if not isinstance(value, dict):
        raise UsageError(f"{where}: `json_schema` must be a JSON object")
    problem = check_schema(value)
    if problem is not None:
        raise UsageError(f"{where}: `json_schema` is not a valid JSON Schema ({problem})")
    return JsonSchemaCheck(json_schema=value)


def resolve_suites(names: list[str], samples: int | None, seed: int) -> list[Item]:
    """`--suite` values: built-in names, `all`, or paths to JSONL files (samples caps each)."""
    if samples is not None and samples < 1:
        raise InvalidInput("samples", "must be at least 1")
    wanted = names or ["all"]
    items: list[Item] = []
    for name in wanted:
        if name == "all":
            for suite in BUILTIN:
                items += builtin_items(suite, samples or DEFAULT_SAMPLES, seed)
        elif name in BUILTIN:
            items += builtin_items(name, samples or DEFAULT_SAMPLES, seed)
        elif name.endswith(".jsonl") or Path(name).is_file():
            items += load_user_suite(Path(name), samples)
        else:
            known = ", ".join([*BUILTIN, "all"])
            raise InvalidInput("suite", f"{name!r} is neither a built-in suite ({known}) nor a .jsonl file")
    ids = [i.id for i in items]
    if len(set(ids)) != len(ids):
        raise InvalidInput("suite", "the same suite is named twice")
    return items


DEFAULT_SAMPLES = 20
