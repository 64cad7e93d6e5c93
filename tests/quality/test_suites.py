"""Seeded suites and user JSONL suites."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tokenrace.errors import UsageError
from tokenrace.quality.suites import BUILTIN, _has_borrow, _has_carry, builtin_items, load_user_suite, resolve_suites


def test_same_seed_same_items_and_prefix_stable() -> None:
    for suite in BUILTIN:
        assert builtin_items(suite, 10, 5) == builtin_items(suite, 10, 5)
        assert builtin_items(suite, 4, 5) == builtin_items(suite, 10, 5)[:4]
        assert [i.prompt for i in builtin_items(suite, 10, 5)] != [i.prompt for i in builtin_items(suite, 10, 6)]


def test_arithmetic_always_carries_or_borrows() -> None:
    for item in builtin_items("arithmetic", 200, 0):
        m = re.match(r"What is (\d+) (.) (\d+)\?", item.prompt)
        assert m is not None, item.prompt
        a, op, b = int(m.group(1)), m.group(2), int(m.group(3))
        if op == "+":
            assert _has_carry(a, b)
        elif op == "-":
            assert _has_borrow(a, b)
        else:
            assert (a % 10) * (b % 10) >= 10


def test_resolve_all_and_errors(tmp_path: Path) -> None:
    items = resolve_suites([], 3, 0)
    assert len(items) == 3 * len(BUILTIN)
    with pytest.raises(UsageError, match="suite: 'nope' is neither"):
        resolve_suites(["nope"], 3, 0)
    with pytest.raises(UsageError, match="samples: must be at least 1"):
        resolve_suites([], 0, 0)
    with pytest.raises(UsageError, match="twice"):
        resolve_suites(["copy", "copy"], 2, 0)


def write(tmp_path: Path, *lines: object) -> Path:
    p = tmp_path / "mine.jsonl"
    p.write_text("\n".join(x if isinstance(x, str) else json.dumps(x) for x in lines) + "\n")
    return p


def test_user_suite_loads_three_kinds(tmp_path: Path) -> None:
    schema = {"type": "object", "required": ["a"]}
    p = write(
        tmp_path,
        {"prompt": "2+2?", "answer": 4},
        {"prompt": "yes?", "regex": "(?i)yes", "id": "q2", "max_tokens": 8},
        "",
        {"prompt": "json", "json_schema": schema},
    )
    items = load_user_suite(p)
    assert [i.suite for i in items] == ["mine"] * 3
    assert [i.id for i in items] == ["mine-0", "q2", "mine-2"]
    assert items[0].check.check("4").correct and not items[0].check.check("5").correct
    assert items[1].max_tokens == 8 and items[1].check.check("Yes").correct
    assert items[2].check.check('{"a": 1}').correct and not items[2].check.check("{}").correct
    assert len(load_user_suite(p, limit=2)) == 2


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("{not json", r"mine.jsonl:1: not JSON"),
        ({"answer": "x"}, r":1: `prompt` must be"),
        ({"prompt": "p"}, r":1: give exactly one of"),
        ({"prompt": "p", "answer": "x", "regex": "x"}, r":1: give exactly one of"),
        ({"prompt": "p", "regex": "("}, r":1: `regex` does not compile"),
        ({"prompt": "p", "json_schema": {"type": 5}}, r":1: `json_schema` is not a valid JSON Schema"),
        ({"prompt": "p", "answer": "x", "colour": 1}, r":1: unknown key 'colour'"),
        ({"prompt": "p", "answer": "x", "max_tokens": 0}, r":1: `max_tokens`"),
    ],
)
def test_user_suite_errors_name_file_and_line(tmp_path: Path, line: object, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        load_user_suite(write(tmp_path, line))


def test_user_suite_duplicate_ids(tmp_path: Path) -> None:
    p = write(tmp_path, {"prompt": "a", "answer": 1, "id": "x"}, {"prompt": "b", "answer": 2, "id": "x"})
    with pytest.raises(UsageError, match=":2: id 'x' is used twice"):
        load_user_suite(p)
