"""Checkers: does one output answer one item correctly?

Every checker is strict and deterministic. Each accepts a small, documented set of presentation
variants that cannot change the answer (surrounding whitespace, Markdown emphasis, a trailing
period, thousands separators) and nothing else: when an output could be read two ways, it is wrong.
docs/quality.md lists what each one accepts and why.
"""

from __future__ import annotations

import importlib
import json
import re
from decimal import Decimal, InvalidOperation
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue

from tokenrace.errors import UsageError

# A number as a person writes it: optional sign, digits with optional thousands commas, decimals.
NUMBER = r"[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?"
_NUMBER_RE = re.compile(NUMBER)
# The last line of a numeric answer: the number alone, after "answer:" / "the answer is", or at the
# end of an equation ("12 + 7 = 19"). Work shown on earlier lines is allowed.
_FINAL_NUMBER = re.compile(
    rf"^(?:(?:the\s+)?(?:final\s+)?answer(?:\s+is)?\s*:?\s*|.*=\s*)?({NUMBER})\s*\.?$", re.IGNORECASE
)
_EMPHASIS = re.compile(r"^(\*\*|__|\*|_|`)(.+)\1$", re.DOTALL)
_QUOTES = (('"', '"'), ("'", "'"), ("`", "`"), ("“", "”"))
_FENCE = re.compile(r"^```[A-Za-z0-9_-]*\n(.*)\n```$", re.DOTALL)


class Verdict(BaseModel):
    model_config = ConfigDict(frozen=True)

    correct: bool
    reason: str | None = None  # why it is wrong; None when right


RIGHT = Verdict(correct=True)


def _wrong(reason: str) -> Verdict:
    return Verdict(correct=False, reason=reason)


def unwrap(text: str) -> str:
    """Trim whitespace and peel Markdown emphasis (**x**, *x*, __x__, _x_, `x`) wrapping the whole."""
    t = text.strip()
    while (m := _EMPHASIS.match(t)) is not None:
        t = m.group(2).strip()
    return t


def peel(text: str) -> str:
    """`unwrap`, also taking off one sentence-ending period at each layer ("**19**." -> "19")."""
    while True:
        t = unwrap(unwrap(text).removesuffix("."))
        if t == text:
            return t
        text = t


def parse_number(text: str) -> Decimal | None:
    """A whole string as a number (thousands commas allowed), or None."""
    if not _NUMBER_RE.fullmatch(text):
        return None
    try:
        return Decimal(text.replace(",", ""))
    except InvalidOperation:  # pragma: no cover - the pattern admits only valid decimals
        return None


class NumberCheck(BaseModel):
    """The last non-empty line is the number: alone, after "Answer:", or ending an equation;
    Markdown emphasis and a final period are ignored, thousands commas accepted, value compared."""

    model_config = ConfigDict(frozen=True)
    kind: Literal["number"] = "number"
    value: str  # a decimal as text, so that 0.1 stays exact

    def check(self, output: str) -> Verdict:
        lines = [ln for ln in output.strip().splitlines() if ln.strip()]
        if not lines:
            return _wrong("no answer")
        # Emphasis marks anywhere on the line ("Answer: **19**") cannot change a digit: dropped.
        m = _FINAL_NUMBER.match(peel(re.sub(r"\*+|`+|__", "", lines[-1])))
        if m is None:
            return _wrong("the last line is not a number on its own")
        got = parse_number(m.group(1))
        if got is None or got != Decimal(self.value):
            return _wrong(f"answered {m.group(1)}, expected {self.value}")
        return RIGHT


class ListCheck(BaseModel):
    """The whole output is the items in order, separated by commas, spaces or newlines."""

    model_config = ConfigDict(frozen=True)
    kind: Literal["list"] = "list"
    items: list[str]

    def check(self, output: str) -> Verdict:
        t = peel(output)
        if t.startswith("[") and t.endswith("]"):
            t = peel(t[1:-1])
        got = [x for x in re.split(r"\s*,\s*|\s+", t.strip()) if x]
        if got != self.items:
            return _wrong(f"got {', '.join(got[:20])}")
        return RIGHT


class ExactCheck(BaseModel):
    """The output is the text exactly, case included. Allowed around it: whitespace, one pair of
    quotes or backticks, and a sentence-ending period (the built-in strings never contain any of
    them, so peeling them cannot turn a wrong copy into a right one)."""

    model_config = ConfigDict(frozen=True)
    kind: Literal["exact"] = "exact"
    text: str

    def check(self, output: str) -> Verdict:
        t = output.strip()
        if t.endswith(".") and not self.text.endswith("."):
            t = t[:-1].rstrip()
        if t == self.text:
            return RIGHT
        for left, right in _QUOTES:
            if len(t) >= 2 and t.startswith(left) and t.endswith(right) and t[1:-1] == self.text:
                return RIGHT
        return _wrong("not an exact copy")


class AnswerCheck(BaseModel):
    """A user suite's `answer`: equal after trimming, collapsing runs of whitespace, peeling Markdown
    emphasis and one trailing period; case matters. Two numbers compare by value (1,000 == 1000.0)."""

    model_config = ConfigDict(frozen=True)
    kind: Literal["answer"] = "answer"
    answer: str

    def check(self, output: str) -> Verdict:
        got, want = _normal(output), _normal(self.answer)
        if got == want:
            return RIGHT
        n_got, n_want = parse_number(got), parse_number(want)
        if n_got is not None and n_want is not None and n_got == n_want:
            return RIGHT
        return _wrong("does not match the answer")


def _normal(text: str) -> str:
    return re.sub(r"\s+", " ", peel(text))


class RegexCheck(BaseModel):
    """A user suite's `regex`: Python `re.fullmatch` on the output with surrounding whitespace
    trimmed (flags inline, e.g. `(?i)`)."""

    model_config = ConfigDict(frozen=True)
    kind: Literal["regex"] = "regex"
    pattern: str

    def check(self, output: str) -> Verdict:
        if re.fullmatch(self.pattern, output.strip()) is None:
            return _wrong("does not match the pattern")
        return RIGHT


class JsonSchemaCheck(BaseModel):
    """The output is one JSON value (bare, or alone in one ``` fence) that validates against the
    schema. Built-in items pin each extracted value with `const`, so the values are checked too."""

    model_config = ConfigDict(frozen=True)
    kind: Literal["json_schema"] = "json_schema"
    json_schema: dict[str, JsonValue]  # a JSON Schema document, as the suite gives it

    def check(self, output: str) -> Verdict:
        t = output.strip()
        fence = _FENCE.match(t)
        if fence is not None:
            t = fence.group(1).strip()
        try:
            value = json.loads(t)
        except json.JSONDecodeError as exc:
            return _wrong(f"not JSON ({exc.msg})")
        error = _first_schema_error(self.json_schema, value)
        return RIGHT if error is None else _wrong(error)


def _jsonschema() -> Any:
    # Imported by name: the package ships no type stubs, and only these two call sites use it.
    try:
        return importlib.import_module("jsonschema")
    except ImportError:  # pragma: no cover - a declared dependency
        raise UsageError("JSON Schema checks need the jsonschema package: pip install jsonschema") from None


def _validator_class(schema: dict[str, JsonValue]) -> Any:
    js = _jsonschema()
    return js.validators.validator_for(schema, default=js.Draft202012Validator)


def check_schema(schema: dict[str, JsonValue]) -> str | None:
    """Why a schema is not a valid JSON Schema, or None."""
    try:
        _validator_class(schema).check_schema(schema)
    except _jsonschema().SchemaError as exc:
        return str(exc.message)
    return None


def _first_schema_error(schema: dict[str, JsonValue], value: JsonValue) -> str | None:
    validator = _validator_class(schema)(schema)
    errors = sorted(validator.iter_errors(value), key=lambda e: list(e.absolute_path))
    if not errors:
        return None
    e = errors[0]
    where = "/".join(str(p) for p in e.absolute_path)
    return f"{where or '(root)'}: {e.message}"[:300]


class LinesCheck(BaseModel):
    """Exactly `count` lines after trimming blank lines at both ends, none of them blank, and when
    `max_words` is set, each line at most that many words."""

    model_config = ConfigDict(frozen=True)
    kind: Literal["lines"] = "lines"
    count: int = Field(ge=1)
    max_words: int | None = Field(default=None, ge=1)

    def check(self, output: str) -> Verdict:
        lines = output.strip("\n").split("\n")
        lines = [ln.rstrip("\r") for ln in lines]
        while lines and not lines[-1].strip():
            lines.pop()
        while lines and not lines[0].strip():
            lines.pop(0)
        if len(lines) != self.count:
            return _wrong(f"{len(lines)} lines, expected {self.count}")
        if any(not ln.strip() for ln in lines):
            return _wrong("a blank line inside the answer")
        if self.max_words is not None:
            long = [ln for ln in lines if len(ln.split()) > self.max_words]
            if long:
                return _wrong(f"a line has more than {self.max_words} words: {long[0][:60]!r}")
        return RIGHT


Check = Annotated[
    NumberCheck | ListCheck | ExactCheck | AnswerCheck | RegexCheck | JsonSchemaCheck | LinesCheck,
    Field(discriminator="kind"),
]
