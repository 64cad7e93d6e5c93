"""Sized filler text, shared prefixes and cache busting."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tokenrace.client.openai import Prompt
from tokenrace.errors import UsageError
from tokenrace.fakes.fake_cache import PrefixCache
from tokenrace.fakes.fake_openai import chat_prompt_text
from tokenrace.load.workloads.prefixes import bust, bust_tag, draw_groups, new_nonce, shared_prefixes, with_prefix
from tokenrace.load.workloads.text import approximate_tokens, fit_ids, sized_text

from .helpers import CharTokenizer, GrowingTokenizer, WordTokenizer


@given(st.integers(1, 300), st.integers(0, 2**32 - 1), st.sampled_from(["", "Group 3."]))
@settings(max_examples=60, deadline=None)
def test_sized_text_is_exact_with_a_tokenizer(target: int, seed: int, lead: str) -> None:
    for tok in (WordTokenizer(), CharTokenizer()):
        made = asyncio.run(sized_text(target, np.random.default_rng(seed), tok, lead=lead))
        assert made.tokens == target and made.exact
        assert len(asyncio.run(tok.encode(made.text))) == target
        if len(lead) < target:
            assert made.text.startswith(lead)


def test_sized_text_without_a_tokenizer_is_one_word_per_token_and_says_so() -> None:
    made = asyncio.run(sized_text(50, np.random.default_rng(1), None, lead="Group 2."))
    assert made.tokens is None and not made.exact
    assert approximate_tokens(made.text) == 50 and made.text.startswith("Group 2. ")
    again = asyncio.run(sized_text(50, np.random.default_rng(1), None, lead="Group 2."))
    assert again.text == made.text  # deterministic given the generator
    with pytest.raises(ValueError, match="at least 1 token"):
        asyncio.run(sized_text(0, np.random.default_rng(1), None))


def test_fit_ids_trims_when_decoding_grows_the_text() -> None:
    tok = GrowingTokenizer()
    ids = asyncio.run(tok.encode("see the tree"))
    made = asyncio.run(fit_ids(ids, len(ids), tok))
    measured = len(asyncio.run(tok.encode(made.text)))
    assert made.tokens == measured <= len(ids)


def test_shared_prefixes_exact_distinct_and_deterministic() -> None:
    tok = WordTokenizer()
    prefixes = asyncio.run(shared_prefixes(64, 4, tok, seed=7))
    assert prefixes.groups == 4 and prefixes.sizing == "exact"
    assert all(len(asyncio.run(tok.encode(t))) == 64 for t in prefixes.texts)
    assert len(set(prefixes.texts)) == 4
    assert asyncio.run(shared_prefixes(64, 4, tok, seed=7)).texts == prefixes.texts
    assert asyncio.run(shared_prefixes(64, 8, tok, seed=7)).texts[:4] == prefixes.texts
    rough = asyncio.run(shared_prefixes(64, 2, None))
    assert rough.sizing == "approximate" and rough.measured == (None, None)


def test_groups_cache_apart_and_requests_of_a_group_hit() -> None:
    """Against the fake server's cache model: a group's second request hits its whole prefix; the
    groups share no block."""
    prefixes = asyncio.run(shared_prefixes(32, 3, WordTokenizer(), seed=1))
    cache = PrefixCache(block_size=4)
    first_hits = []
    for group in range(3):
        prompt = prefixes.apply(Prompt(text="question one"), group)
        first_hits.append(cache.lookup_and_insert(chat_prompt_text(prompt.as_messages())).cached_tokens)
    assert first_hits == [0, 0, 0]
    again = prefixes.apply(Prompt(messages=[{"role": "user", "content": "another question"}]), 1)
    assert again.as_messages()[0] == {"role": "system", "content": prefixes.texts[1]}
    assert cache.lookup_and_insert(chat_prompt_text(again.as_messages())).cached_tokens == 32


def test_draw_groups_uniform_and_deterministic() -> None:
    draws = draw_groups(4000, 4, seed=3)
    assert draws == draw_groups(4000, 4, seed=3) != draw_groups(4000, 4, seed=4)
    counts = np.bincount(draws, minlength=4)
    assert counts.min() > 850  # 1000 expected each
    with pytest.raises(UsageError, match="prefix groups"):
        draw_groups(3, 0)
    with pytest.raises(UsageError, match="shared prefix length"):
        asyncio.run(shared_prefixes(0, 2, None))


def test_with_prefix_keeps_the_prompt_and_extends_a_system_message() -> None:
    chat = Prompt(messages=[{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}], max_tokens=9)
    out = with_prefix(chat, "PREFIX")
    assert out.messages is not None and out.messages[0]["content"] == "PREFIX\n\nbe brief" and out.max_tokens == 9
    assert chat.messages is not None and chat.messages[0]["content"] == "be brief"  # the original is untouched
    assert with_prefix(Prompt(text="hello"), "P").text == "P\n\nhello"
    keeps = with_prefix(Prompt(text="x", headers={"X-Session-ID": "s"}, label="L"), "P")
    assert keeps.headers == {"X-Session-ID": "s"} and keeps.label == "L"
    assert bust(keeps, "n", 1).headers == {"X-Session-ID": "s"}


def test_bust_tag_is_first_and_unique_per_request_and_run() -> None:
    nonce = new_nonce()
    assert nonce != new_nonce() and len(nonce) == 8
    tags = [bust_tag(nonce, seq) for seq in range(1000)]
    assert len(set(tags)) == 1000 and tags == [bust_tag(nonce, seq) for seq in range(1000)]
    assert tags != [bust_tag("other", seq) for seq in range(1000)]
    # token-by-token caches (llama.cpp, SGLang) must find no common opening between requests
    differ_at_once = sum(a[0] != b[0] for a, b in zip(tags, tags[1:], strict=False))
    assert differ_at_once > 0.85 * 999
    chat = Prompt(messages=[{"role": "system", "content": "S"}, {"role": "user", "content": "U"}])
    busted = bust(chat, "abcd", 5)
    assert busted.messages is not None and busted.messages[0]["content"] == f"{bust_tag('abcd', 5)} S"
    assert bust(Prompt(text="T"), "abcd", 6).text == f"{bust_tag('abcd', 6)} T"
    parts = Prompt(messages=[{"role": "user", "content": [{"type": "text", "text": "U"}]}])
    assert bust(parts, "n", 1).as_messages()[0]["content"][0] == {"type": "text", "text": bust_tag("n", 1)}


def test_busted_prompts_share_no_cache_block() -> None:
    cache = PrefixCache(block_size=1)  # the finest cache: even one shared word would show
    prompt = Prompt(messages=[{"role": "user", "content": "the same question every time"}])
    hits = [
        cache.lookup_and_insert(chat_prompt_text(bust(prompt, "run1", seq).as_messages())).cached_tokens
        for seq in range(20)
    ]
    assert hits == [0] * 20


def test_bust_as_system_message() -> None:
    tag = bust_tag("n", 3)
    plain = bust(Prompt(text="hello", max_tokens=5), "n", 3, system=True)
    assert plain.text is None and plain.max_tokens == 5
    assert plain.as_messages() == [{"role": "system", "content": tag}, {"role": "user", "content": "hello"}]
    chat = Prompt(messages=[{"role": "user", "content": "U"}])
    assert bust(chat, "n", 3, system=True).as_messages()[0] == {"role": "system", "content": tag}
    with_system = Prompt(messages=[{"role": "system", "content": "S"}, {"role": "user", "content": "U"}])
    out = bust(with_system, "n", 3, system=True).as_messages()
    assert out == [{"role": "system", "content": f"{tag} S"}, {"role": "user", "content": "U"}]
    assert with_system.messages == [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}]
