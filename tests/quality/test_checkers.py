"""The checkers: a right answer in any accepted form passes, a wrong one in any form never does."""

from __future__ import annotations

import json
import string

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st
from pydantic import JsonValue
from tests.quality.answers import right_answer, wrong_answer

from tokenrace.quality.checkers import (
    AnswerCheck,
    ExactCheck,
    JsonSchemaCheck,
    LinesCheck,
    ListCheck,
    NumberCheck,
    RegexCheck,
)
from tokenrace.quality.suites import BUILTIN, builtin_items

# How a model may present a final number; every form is documented in docs/quality.md.
NUMBER_FORMS = [
    "{}",
    " {} \n",
    "{}.",
    "**{}**",
    "`{}`",
    "Answer: {}",
    "The answer is {}.",
    "final answer: **{}**",
    "12 + 7 = {}",
    "First I add.\nThen I subtract.\n= {}",
]


def with_commas(n: int) -> str:
    return f"{n:,}"


@given(value=st.integers(-(10**7), 10**7), form=st.sampled_from(NUMBER_FORMS), commas=st.booleans())
def test_number_right_always_passes(value: int, form: str, commas: bool) -> None:
    text = with_commas(value) if commas else str(value)
    assert NumberCheck(value=str(value)).check(form.format(text)).correct


@given(value=st.integers(-(10**7), 10**7), other=st.integers(-(10**7), 10**7), form=st.sampled_from(NUMBER_FORMS))
def test_number_wrong_never_passes(value: int, other: int, form: str) -> None:
    assume(other != value)
    assert not NumberCheck(value=str(value)).check(form.format(other)).correct


@given(value=st.integers(0, 10**6), other=st.integers(0, 10**6))
def test_number_ambiguous_outputs_are_wrong(value: int, other: int) -> None:
    # Two candidate answers, or a right answer followed by a different one: the last line decides.
    check = NumberCheck(value=str(value))
    assume(other != value)
    assert not check.check(f"{value} or {other}").correct
    assert not check.check(f"{value}\n{other}").correct
    assert not check.check(f"{value} apples").correct
    assert not check.check("").correct


def test_number_decimal_values_compare_by_value() -> None:
    check = NumberCheck(value="19")
    assert check.check("19.0").correct
    assert not check.check("19.5").correct
    assert not check.check("1,9").correct  # not a thousands grouping: rejected, not read as 19


LIST_SEPARATORS = [", ", ",", " ", "\n", " , "]


@given(
    values=st.lists(st.integers(1, 999), min_size=2, max_size=9, unique=True),
    sep=st.sampled_from(LIST_SEPARATORS),
    brackets=st.booleans(),
    period=st.booleans(),
)
def test_list_right_always_passes(values: list[int], sep: str, brackets: bool, period: bool) -> None:
    items = [str(v) for v in sorted(values)]
    text = sep.join(items)
    text = f"[{text}]" if brackets else text
    text = text + "." if period else text
    assert ListCheck(items=items).check(text).correct


@pytest.mark.slow
@given(
    values=st.lists(st.integers(1, 999), min_size=2, max_size=9, unique=True),
    sep=st.sampled_from(LIST_SEPARATORS),
    data=st.data(),
)
def test_list_wrong_never_passes(values: list[int], sep: str, data: st.DataObject) -> None:
    items = [str(v) for v in sorted(values)]
    got = data.draw(st.permutations(items) | st.lists(st.sampled_from(items), max_size=10))
    assume(got != items)
    assert not ListCheck(items=items).check(sep.join(got)).correct


COPY_TEXT = st.text(alphabet=string.ascii_letters + string.digits, min_size=1, max_size=30)


@given(text=COPY_TEXT, wrap=st.sampled_from(["{}", "  {}\n", '"{}"', "'{}'", "`{}`", "{}."]))
def test_exact_right_always_passes(text: str, wrap: str) -> None:
    assert ExactCheck(text=text).check(wrap.format(text)).correct


@given(text=COPY_TEXT, other=COPY_TEXT, wrap=st.sampled_from(["{}", '"{}"', "{}.", "**{}**"]))
def test_exact_wrong_never_passes(text: str, other: str, wrap: str) -> None:
    assume(other != text)
    assert not ExactCheck(text=text).check(wrap.format(other)).correct
    assert not ExactCheck(text=text).check(text.swapcase() if text.swapcase() != text else text + "x").correct


NAME = st.text(alphabet=string.ascii_letters + " ", min_size=1, max_size=20)


def person_schema(name: str, age: int) -> dict[str, JsonValue]:
    return {
        "type": "object",
        "properties": {"name": {"type": "string", "const": name}, "age": {"type": "integer", "const": age}},
        "required": ["name", "age"],
        "additionalProperties": False,
    }


@given(name=NAME, age=st.integers(0, 120), indent=st.sampled_from([None, 2]), fence=st.sampled_from(["", "json"]))
def test_json_right_always_passes(name: str, age: int, indent: int | None, fence: str) -> None:
    body = json.dumps({"age": age, "name": name}, indent=indent)
    text = f"```{fence}\n{body}\n```" if fence or indent else body
    assert JsonSchemaCheck(json_schema=person_schema(name, age)).check(text).correct


@given(name=NAME, age=st.integers(0, 120), other_age=st.integers(0, 120), extra=st.booleans())
def test_json_wrong_never_passes(name: str, age: int, other_age: int, extra: bool) -> None:
    check = JsonSchemaCheck(json_schema=person_schema(name, age))
    if extra:
        value: dict[str, object] = {"name": name, "age": age, "city": "x"}  # a key the schema forbids
    else:
        assume(other_age != age)
        value = {"name": name, "age": other_age}
    assert not check.check(json.dumps(value)).correct
    assert not check.check(f"Here is the JSON: {json.dumps({'name': name, 'age': age})}").correct


@given(count=st.integers(1, 8), words=st.integers(1, 3), trailing=st.booleans())
def test_lines_right_always_passes(count: int, words: int, trailing: bool) -> None:
    text = "\n".join(" ".join(["w"] * words) for _ in range(count)) + ("\n\n" if trailing else "")
    assert LinesCheck(count=count, max_words=3).check(text).correct


@given(count=st.integers(1, 8), got=st.integers(0, 10))
def test_lines_wrong_count_never_passes(count: int, got: int) -> None:
    assume(got != count)
    assert not LinesCheck(count=count).check("\n".join(["word"] * got)).correct


def test_lines_blank_inside_and_long_lines_fail() -> None:
    assert not LinesCheck(count=3).check("a\n\nb").correct
    assert not LinesCheck(count=2, max_words=3).check("one two three four\nfive").correct


@pytest.mark.parametrize("suite", list(BUILTIN))
def test_every_builtin_item_accepts_its_answer_and_rejects_a_wrong_one(suite: str) -> None:
    for item in builtin_items(suite, 50, seed=3):
        assert item.check.check(right_answer(item.check)).correct, item
        verdict = item.check.check(wrong_answer(item.check))
        assert not verdict.correct and verdict.reason, item


@given(answer=st.one_of(st.integers(-(10**6), 10**6).map(str), st.text(string.ascii_letters + " ", min_size=1)))
def test_user_answer_right_forms_pass(answer: str) -> None:
    assume(answer.strip())
    check = AnswerCheck(answer=answer)
    assert check.check(f"  {answer.strip()}  ").correct
    assert check.check(f"**{answer.strip()}**.").correct


def test_user_answer_is_case_sensitive_and_numbers_compare_by_value() -> None:
    assert not AnswerCheck(answer="Paris").check("paris").correct
    assert AnswerCheck(answer="1000").check("1,000").correct
    assert not AnswerCheck(answer="Paris").check("Paris, France").correct


def test_regex_is_a_full_match() -> None:
    check = RegexCheck(pattern=r"(?i)yes")
    assert check.check(" YES \n").correct
    assert not check.check("yes, of course").correct
