"""The agreement functions the quality comparison and the gateway's shadow mode share."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

import tokenrace.text_agreement as agreement_module
from tokenrace.gateway import shadow
from tokenrace.quality import paired
from tokenrace.text_agreement import agreement, agreement_rate, exact_match_rate, tokens


def test_tokens_split_words_and_punctuation() -> None:
    assert tokens("Paris, France.") == ["Paris", ",", "France", "."]
    assert tokens("a  b\n") == tokens("a b")


def test_known_similarities() -> None:
    assert agreement("the cat sat", "the cat sat") == 1.0
    assert agreement("the cat sat", "a dog ran") == 0.0
    assert agreement("", "") == 1.0
    assert agreement("x", "") == 0.0
    # 2 shared of 3 + 3 tokens: 2 * 2 / 6
    assert agreement("the cat sat", "the cat ran") == pytest.approx(2 / 3)
    assert agreement("Paris", "Paris.") == pytest.approx(2 * 1 / 3)


@given(a=st.text(max_size=200), b=st.text(max_size=200))
def test_agreement_is_a_similarity(a: str, b: str) -> None:
    s = agreement(a, b)
    assert 0.0 <= s <= 1.0
    assert agreement(a, a) == 1.0
    assert (s == 1.0) == (tokens(a) == tokens(b))


def test_a_token_limit_compares_only_the_beginnings() -> None:
    assert agreement("a b c d", "a b x y", max_tokens=2) == 1.0
    assert agreement("a b c d", "a b x y", max_tokens=3) == pytest.approx(2 / 3)
    assert agreement("a b c d", "a b x y", max_tokens=None) == agreement("a b c d", "a b x y") == 0.5


def test_rates_over_pairs() -> None:
    pairs = [("42", "42\n"), ("yes", "no"), ("a b", "a c")]
    assert exact_match_rate(pairs) == pytest.approx(1 / 3)
    assert agreement_rate(pairs) == pytest.approx((1.0 + 0.0 + 0.5) / 3)
    assert exact_match_rate([]) is None and agreement_rate([]) is None


def test_a_leaf_of_stdlib_only() -> None:
    tree = ast.parse(Path(agreement_module.__file__).read_text())
    imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert imported <= {"__future__", "difflib", "re", "collections"}, imported


def test_the_gateway_shadow_scores_with_the_same_functions() -> None:
    used, scored = vars(shadow), vars(paired)  # what each module imported
    assert used["agreement"] is agreement and used["exact_match"] is agreement_module.exact_match
    # The quality comparison scores its pairs with the rates over the same two functions.
    assert scored["agreement_rate"] is agreement_rate and scored["exact_match_rate"] is exact_match_rate
