from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.conftest import run
from tokenizers import Tokenizer, decoders, models, pre_tokenizers

from tokenrace.errors import UsageError
from tokenrace.load import prompts
from tokenrace.load.tokens import HFTokenizer, fill_token_counts, load_tokenizer
from tokenrace.model.records import RequestRecord


@pytest.fixture
def tokenizer_json(tmp_path: Path) -> Path:
    """A real tokenizer.json built offline: one token per lower-case word, spaces kept."""
    words = prompts._WORDS + ["hello", "world", "the", "a"]
    vocab = {"[UNK]": 0}
    for w in words:
        vocab.setdefault(w, len(vocab))
        vocab.setdefault("Ġ" + w, len(vocab))
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    path = tmp_path / "tokenizer.json"
    tok.save(str(path))
    return path


def test_synthetic_prompts_are_exact_with_a_tokenizer(tokenizer_json: Path) -> None:
    tok = HFTokenizer(tokenizer_json)
    ps = run(prompts.synthetic((50, 10), tok, n=8, seed=3))
    assert ps.sizing == "exact"
    for p in ps.prompts:
        want = int(p.label.split("=")[1])
        assert len(run(tok.encode(p.as_text()))) == want


def test_synthetic_without_tokenizer_says_approximate() -> None:
    ps = run(prompts.synthetic((40, 0), None, n=3))
    assert ps.sizing == "approximate" and len(ps.prompts) == 3


def test_local_tokenizer_counts_and_per_chunk_tokens(tokenizer_json: Path) -> None:
    tok = load_tokenizer(str(tokenizer_json))
    r = RequestRecord(seq=0)
    r.text = "hello world the model"
    r.chunk_ns = [1, 2]
    r.chunk_chars = [len("hello world"), len(" the model")]
    run(fill_token_counts(r, "hello world", tok))
    assert (r.output_tokens, r.output_tokens_source) == (4, "tokenizer")
    assert (r.prompt_tokens, r.prompt_tokens_source) == (2, "tokenizer")
    assert r.chunk_tokens == [2, 2]


def test_usage_wins_over_the_tokenizer(tokenizer_json: Path) -> None:
    r = RequestRecord(seq=0)
    r.text = "hello world"
    r.chunk_ns = [1, 2]
    r.chunk_chars = [5, 6]
    r.usage = {"completion_tokens": 2, "prompt_tokens": 9}
    run(fill_token_counts(r, "x", load_tokenizer(str(tokenizer_json))))
    assert (r.output_tokens_source, r.prompt_tokens, r.chunk_tokens) == ("usage", 9, [1, 1])


def test_prompt_file(tmp_path: Path) -> None:
    f = tmp_path / "p.jsonl"
    f.write_text(
        "\n".join(
            [
                json.dumps({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 5}),
                json.dumps({"prompt": "plain"}),
                json.dumps("bare string"),
            ]
        )
    )
    ps = prompts.from_jsonl(f)
    assert [p.max_tokens for p in ps.prompts] == [5, None, None]
    assert ps.pick(4).as_text() == "plain"


@pytest.mark.parametrize(
    "line,msg",
    [
        ("{bad", "not JSON"),
        ('{"x": 1}', "expected"),
        ('{"prompt": "a", "max_tokens": 0}', "max_tokens"),
        # Chat messages are checked when read, before any request is sent.
        ('{"messages": [{"content": "hi"}]}', 'message 0: expected an object with a "role"'),
        ('{"messages": [{"role": "user", "content": "a"}, {"role": "user", "content": 7}]}', "message 1: content must"),
        ('{"messages": [{"role": "user", "content": [{"type": "text"}]}]}', "message 0: content must be text"),
        ('{"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]}', "has no URL"),
    ],
)
def test_prompt_file_errors_name_the_line(tmp_path: Path, line: str, msg: str) -> None:
    f = tmp_path / "p.jsonl"
    f.write_text('{"prompt": "ok"}\n' + line + "\n")
    with pytest.raises(UsageError, match=f"p.jsonl:2: .*{msg}"):
        prompts.from_jsonl(f)


def test_builtin_set_has_english_and_chinese() -> None:
    texts = [p.as_text() for p in prompts.builtin().prompts]
    assert any(any("\u4e00" <= ch <= "\u9fff" for ch in t) for t in texts)
    assert any(t.isascii() for t in texts) and len(texts) >= 10
