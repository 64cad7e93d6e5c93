"""Multi-turn sessions: turns, think times, the history that carries the model's real answers, files."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tokenrace.errors import UsageError
from tokenrace.load.workloads.sessions import (
    Conversation,
    Turn,
    TurnsSpec,
    draw_think_times,
    draw_turns,
    load_messages_jsonl,
    load_sharegpt,
    messages_for_turn,
    parse_turns,
    session_header_value,
    session_prompt,
    synthetic_conversations,
    with_think_times,
)


def test_parse_turns() -> None:
    assert parse_turns("4") == TurnsSpec(4, 0)
    assert parse_turns("3, 1.5") == TurnsSpec(3, 1.5)
    for bad in ("", "x", "0", "3,-1", "1,2,3", "nan"):
        with pytest.raises(UsageError, match="turns"):
            parse_turns(bad)


@given(st.floats(1, 20), st.floats(0, 30), st.integers(0, 2**32 - 1))
def test_drawn_turns_are_at_least_one_and_deterministic(mean: float, std: float, seed: int) -> None:
    turns = draw_turns(TurnsSpec(mean, std), 50, seed)
    assert len(turns) == 50 and min(turns) >= 1
    assert turns == draw_turns(TurnsSpec(mean, std), 50, seed)


def test_turns_spread_around_the_mean() -> None:
    turns = draw_turns(TurnsSpec(6, 2), 4000, seed=1)
    assert abs(float(np.mean(turns)) - 6) < 0.15 and 1.8 < float(np.std(turns)) < 2.2
    assert draw_turns(TurnsSpec(3), 5) == [3] * 5


def test_think_times_exponential_with_the_mean() -> None:
    pauses = draw_think_times(20001, 2.0, np.random.default_rng(0))
    assert len(pauses) == 20000 and min(pauses) >= 0
    assert abs(float(np.mean(pauses)) - 2.0) < 0.06
    assert abs(float(np.median(pauses)) - 2.0 * np.log(2)) < 0.06  # exponential, not uniform
    assert draw_think_times(5, 0, np.random.default_rng(0)) == ()
    with pytest.raises(UsageError, match="think time"):
        draw_think_times(3, -1, np.random.default_rng(0))


def test_synthetic_conversations() -> None:
    convs = synthetic_conversations(20, TurnsSpec(3, 1), ["a", "b", "c"], think_time_s=1.5, seed=4, system="sys")
    assert [c.id for c in convs[:2]] == ["s1", "s2"]
    assert all(len(c.think_s) == len(c.turns) - 1 for c in convs)
    assert all(t.user in ("a", "b", "c") for c in convs for t in c.turns)
    assert convs == synthetic_conversations(
        20, TurnsSpec(3, 1), ["a", "b", "c"], think_time_s=1.5, seed=4, system="sys"
    )
    assert convs[0].think_before(1) == 0.0 and convs[0].system == "sys"
    with pytest.raises(UsageError, match="at least one user prompt"):
        synthetic_conversations(1, TurnsSpec(1), [])


def test_history_carries_the_models_real_answers() -> None:
    conv = Conversation("c", (Turn("q1", reference="file answer 1"), Turn("q2"), Turn("q3")), system="sys")
    assert messages_for_turn(conv, 1, []) == [{"role": "system", "content": "sys"}, {"role": "user", "content": "q1"}]
    third = messages_for_turn(conv, 3, ["real 1", "real 2"])
    assert [m["role"] for m in third] == ["system", "user", "assistant", "user", "assistant", "user"]
    assert [m["content"] for m in third[2::2]] == ["real 1", "real 2"]  # not the file's reference answer
    assert third[-1]["content"] == "q3"
    with pytest.raises(ValueError, match="earlier answers"):
        messages_for_turn(conv, 3, ["only one"])
    with pytest.raises(ValueError, match="no turn 4"):
        messages_for_turn(conv, 4, ["a", "b", "c"])


def test_think_before_and_conversation_checks() -> None:
    conv = Conversation("c", (Turn("a"), Turn("b"), Turn("c")), think_s=(1.0, 2.0))
    assert [conv.think_before(t) for t in (1, 2, 3)] == [0.0, 1.0, 2.0]
    with pytest.raises(ValueError, match="no user turn"):
        Conversation("c", ())
    with pytest.raises(ValueError, match="think times"):
        Conversation("c", (Turn("a"),), think_s=(1.0,))


def _write(path: Path, obj: object) -> Path:
    path.write_bytes(orjson.dumps(obj))
    return path


def test_load_sharegpt(tmp_path: Path) -> None:
    data = [
        {
            "id": "x1",
            "conversations": [
                {"from": "system", "value": "be kind"},
                {"from": "human", "value": "hi"},
                {"from": "gpt", "value": "hello"},
                {"from": "human", "value": "and?"},
            ],
        },
        {
            "conversations": [
                {"from": "human", "value": "a"},
                {"from": "human", "value": "b"},
                {"from": "gpt", "value": "c"},
            ]
        },
    ]
    loaded = load_sharegpt(_write(tmp_path / "chats.json", data))
    first, second = loaded.conversations
    assert first.id == "x1" and first.system == "be kind"
    assert first.turns == (Turn("hi", reference="hello"), Turn("and?"))
    assert second.id == "chats-1" and second.turns == (Turn("a\n\nb", reference="c"),)
    assert loaded.skipped == ()


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ("not an object", 'entry 1: expected an object with a "conversations" list'),
        ({"conversations": [{"from": "human", "value": 3}]}, "entry 1, message 0: expected"),
        ({"conversations": [{"from": "robot", "value": "x"}]}, "entry 1, message 0: \"from\" is 'robot'"),
        (
            {"conversations": [{"from": "gpt", "value": "x"}]},
            "entry 1: the conversation must start with a user message",
        ),
        ({"conversations": []}, "entry 1: no user turn"),
        (
            {"conversations": [{"from": "human", "value": "x"}, {"from": "system", "value": "s"}]},
            "a system message is only allowed first",
        ),
    ],
)
def test_sharegpt_errors_name_the_entry(tmp_path: Path, entry: object, message: str) -> None:
    path = _write(tmp_path / "bad.json", [{"conversations": [{"from": "human", "value": "ok"}]}, entry])
    with pytest.raises(UsageError) as err:
        load_sharegpt(path)
    assert str(err.value).startswith(str(path)) and message in str(err.value)
    kept = load_sharegpt(path, skip_invalid=True)
    assert len(kept.conversations) == 1 and len(kept.skipped) == 1 and message in kept.skipped[0]


def test_sharegpt_file_errors(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="cannot read"):
        load_sharegpt(tmp_path / "missing.json")
    (tmp_path / "broken.json").write_text("[{")
    with pytest.raises(UsageError, match="not JSON"):
        load_sharegpt(tmp_path / "broken.json")
    with pytest.raises(UsageError, match="expected a JSON list"):
        load_sharegpt(_write(tmp_path / "obj.json", {"conversations": []}))
    with pytest.raises(UsageError, match="no usable conversations"):
        load_sharegpt(_write(tmp_path / "empty.json", []))


def test_load_messages_jsonl(tmp_path: Path) -> None:
    lines = [
        {"id": 7, "messages": [{"role": "user", "content": "one"}, {"role": "assistant", "content": "two"}]},
        {
            "messages": [
                {"role": "system", "content": "s"},
                {"role": "user", "content": [{"type": "text", "text": "parts"}]},
            ]
        },
    ]
    path = tmp_path / "convs.jsonl"
    path.write_text("\n".join(orjson.dumps(x).decode() for x in lines) + "\n\n")
    first, second = load_messages_jsonl(path).conversations
    assert first.id == "7" and first.turns == (Turn("one", reference="two"),)
    assert second.id == "convs-2" and second.system == "s" and second.turns == (Turn("parts"),)
    path.write_text(orjson.dumps(lines[0]).decode() + "\n" + '{"messages": [{"role": "tool", "content": "x"}]}\n')
    with pytest.raises(UsageError, match=r"convs\.jsonl:2, message 0: expected a \"role\""):
        load_messages_jsonl(path)
    path.write_text("{nope\n")
    with pytest.raises(UsageError, match=r"convs\.jsonl:1: not JSON"):
        load_messages_jsonl(path)
    path.write_text('{"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}\n')
    with pytest.raises(UsageError, match="an image_url part has no URL"):
        load_messages_jsonl(path)
    path.write_text('{"messages": [{"role": "user", "content": [{"type": "input_audio"}]}]}\n')
    with pytest.raises(UsageError, match="content must be text"):
        load_messages_jsonl(path)


def test_with_think_times_for_file_conversations() -> None:
    convs = [Conversation(str(i), (Turn("a"), Turn("b"), Turn("c"))) for i in range(3)]
    timed = with_think_times(convs, 2.0, seed=1)
    assert all(len(c.think_s) == 2 and c.turns == convs[0].turns for c in timed)
    assert timed == with_think_times(convs, 2.0, seed=1)


def test_session_prompt_header_and_label() -> None:
    conv = Conversation("conv\r\nX-Evil: 1", (Turn("a", max_tokens=7), Turn("b")))
    first = session_prompt(conv, 1, [])
    assert first.headers == {"X-Session-ID": "conv__X-Evil:_1"} and first.max_tokens == 7
    assert first.label == "conv\r\nX-Evil: 1#1"
    assert session_prompt(conv, 2, ["ans"], header="X-Conv").headers == {"X-Conv": "conv__X-Evil:_1"}
    assert session_prompt(conv, 2, ["ans"], header=None).headers is None
    assert session_header_value("") == "_" and len(session_header_value("x" * 500)) == 128
