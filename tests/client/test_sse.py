from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.conftest import parse_all

from tokenrace.client.sse import SSEEvent, SSEParser

field_text = st.text(alphabet=st.characters(blacklist_characters="\r\n", blacklist_categories=["Cs"]), max_size=20)
newline = st.sampled_from([b"\n", b"\r\n", b"\r"])


@st.composite
def sse_streams(draw: st.DrawFn) -> bytes:
    out = b""
    for _ in range(draw(st.integers(0, 8))):
        nl = draw(newline)
        for kind in draw(st.lists(st.sampled_from(["data", "event", "id", "comment", "bare"]), max_size=4)):
            value = draw(field_text).encode()
            if kind == "comment":
                out += b":" + value + nl
            elif kind == "bare":
                out += b"data" + nl
            else:
                out += kind.encode() + b": " + value + nl
        out += nl
    return out


@pytest.mark.slow
@settings(max_examples=300)
@given(stream=sse_streams(), cuts=st.lists(st.integers(0, 10_000), max_size=12))
def test_any_split_gives_the_same_events(stream: bytes, cuts: list[int]) -> None:
    whole = parse_all(stream)
    points = sorted({c % (len(stream) + 1) for c in cuts})
    parser = SSEParser()
    events: list[SSEEvent] = []
    prev = 0
    for p in points + [len(stream)]:
        events += parser.feed(stream[prev:p])
        prev = p
    assert events + parser.close() == whole


@given(stream=sse_streams())
def test_byte_by_byte(stream: bytes) -> None:
    parser = SSEParser()
    events = [e for i in range(len(stream)) for e in parser.feed(stream[i : i + 1])]
    assert events + parser.close() == parse_all(stream)


@given(payloads=st.lists(field_text, max_size=10), nl=newline)
def test_data_round_trip(payloads: list[str], nl: bytes) -> None:
    stream = b"".join(b"data: " + p.encode() + nl + nl for p in payloads)
    assert [e.data for e in parse_all(stream)] == payloads


def test_multiline_data_comments_and_fields() -> None:
    s = b": ping\n\ndata: a\ndata:b\nevent: x\nid: 7\n\ndata: tail-without-blank-line"
    events = parse_all(s)
    assert [(e.data, e.event, e.id) for e in events] == [("a\nb", "x", "7")]
    assert events[0].end == s.index(b"\n\ndata: tail") + 2


def test_crlf_split_between_chunks_is_one_line_end() -> None:
    p = SSEParser()
    assert p.feed(b"data: x\r") == []
    assert p.feed(b"\n") == []
    assert [e.data for e in p.feed(b"\r\n")] == ["x"]


def test_event_end_offsets_point_past_the_blank_line() -> None:
    s = b"data: one\n\ndata: two\n\n"
    ends = [e.end for e in parse_all(s)]
    assert ends == [len(b"data: one\n\n"), len(s)]
