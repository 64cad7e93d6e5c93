"""Tools and structured output against the fake server programmed to answer with tool-call deltas
or JSON documents (valid and invalid): counts, timings against the server's own send log, validity."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from pydantic import JsonValue
from tests.conftest import in_process, run, tokenrace

from tokenrace.client.apis.chat import ChatReader, StructuredChatReader
from tokenrace.client.openai import OpenAIClient, Prompt, RequestOptions
from tokenrace.client.structured import Tool, check_tools, read_schema, response_format, tool_choice
from tokenrace.errors import InvalidInput
from tokenrace.fakes.fake_server import spawn_fake_server
from tokenrace.load.tokens import fill_token_counts
from tokenrace.model.records import RequestRecord
from tokenrace.model.summary import Summary
from tokenrace.report.tables import headline_lines

UNREACHABLE = "http://127.0.0.1:9"
TOOLS: list[Tool] = [
    {
        "type": "function",
        "function": {
            "name": "search",
            "description": "Search the web",
            "parameters": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]},
        },
    }
]
SCHEMA: dict[str, JsonValue] = {
    "title": "person",
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
    "required": ["name", "age"],
    "additionalProperties": False,
}
VALID = '{"name": "Ada", "age": 36}'
INVALID = '{"name": "Ada", "age": "old"}'


@pytest.fixture(scope="module")
def server() -> Iterator[Any]:
    with spawn_fake_server({"ttft_ms": 60, "itl_ms": 8, "output_tokens": 12}) as srv:
        yield srv


async def _send(base_url: str, n: int, overrides: dict[str, Any], **opts: Any) -> list[RequestRecord]:
    options = RequestOptions(max_tokens=None, extra_body={"fake": overrides}, **opts)
    async with OpenAIClient(base_url, "fake-model", options=options) as c:
        recs = await asyncio.gather(*(c.send(Prompt(text="one two three"), RequestRecord(seq=i)) for i in range(n)))
        for r in recs:
            await fill_token_counts(r, "one two three", None)
            r.settle(0)  # as the run store does when it writes the record
        return list(recs)


def test_the_plain_path_keeps_its_reader() -> None:
    """No tools and no schema: the plain reader, with no per-chunk work for tool calls."""
    plain = OpenAIClient("http://x/v1", "m")._reader(RequestRecord(seq=0))
    assert type(plain) is ChatReader
    tools = OpenAIClient("http://x/v1", "m", options=RequestOptions(tools=TOOLS))._reader(RequestRecord(seq=0))
    assert type(tools) is StructuredChatReader


@pytest.mark.slow
def test_tool_call_deltas_are_chunks_and_tokens_timed_as_sent(server: Any) -> None:
    server.reset()
    recs = run(_send(server.base_url, 3, {"tool_calls": 2}, tools=TOOLS, tool_choice="required"))
    log = server.log(wait_idle_s=2)
    for r in recs:
        assert r.ok, r.error_message
        assert r.tool_calls == 2 and r.finish_reason == "tool_calls"
        sent = [c for c in next(e for e in log if e["id"] == r.response_id)["chunks"] if c["kind"] == "tool"]
        assert len(r.chunk_ns) == len(sent) == 12  # every argument delta is an output chunk
        assert r.output_tokens == 12 and r.output_tokens_source == "usage"
        assert r.first_tool_ns is not None and r.first_answer_ns is None and r.reasoning_chunks == 0
        bias_ms = (r.first_tool_ns - sent[0]["t_ns"]) / 1e6
        assert 0 <= bias_ms < 20
        assert r.ttft_tool_ms == r.ttft_ms and r.ttft_tool_ms is not None and r.ttft_tool_ms >= 60
        assert r.tpot_ms is not None and 6 < r.tpot_ms < 20  # 8 ms a token
        # The arguments of both calls were read whole: two JSON objects, one after the other.
        assert r.text.startswith("search") and r.text.count('{"q": ') == 2
    line = orjson.loads(recs[0].model_dump_json())
    assert line["tool_calls"] == 2 and line["ttft_tool_ms"] == recs[0].ttft_tool_ms


def test_a_server_answering_text_to_tools_records_zero_calls(server: Any) -> None:
    recs = run(_send(server.base_url, 1, {}, tools=TOOLS))
    assert recs[0].ok and recs[0].tool_calls == 0 and recs[0].first_tool_ns is None
    assert recs[0].ttft_tool_ms is None and orjson.loads(recs[0].model_dump_json())["ttft_tool_ms"] is None
    plain = run(_send(server.base_url, 1, {}))
    assert plain[0].tool_calls is None  # no tools offered: nothing to count


@pytest.mark.parametrize("stream", [True, False])
def test_answers_are_validated_against_the_schema(server: Any, stream: bool) -> None:
    name, schema = "person", SCHEMA
    for answer, expected in ((VALID, True), (INVALID, False), ("not json at all", False)):
        recs = run(
            _send(
                server.base_url, 1, {"answer": answer}, stream=stream, response_schema=schema, response_schema_name=name
            )
        )
        assert recs[0].ok and recs[0].schema_valid is expected, (answer, recs[0].text)
    failed = run(_send(server.base_url, 1, {"fault": "500"}, stream=stream, response_schema=schema))
    assert not failed[0].ok and failed[0].schema_valid is None  # nothing to check


def test_tools_with_a_non_streamed_body(server: Any) -> None:
    recs = run(_send(server.base_url, 1, {"tool_calls": 3, "output_tokens": 6}, stream=False, tools=TOOLS))
    assert recs[0].ok and recs[0].tool_calls == 3 and recs[0].finish_reason == "tool_calls"


def test_the_request_body_carries_tools_and_the_response_format() -> None:
    options = RequestOptions(tools=TOOLS, tool_choice="auto", response_schema=SCHEMA, response_schema_name="person")
    body = OpenAIClient("http://x/v1", "m", options=options).body(Prompt(text="hi"))
    assert body["tools"] == TOOLS and body["tool_choice"] == "auto"
    assert body["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "person", "schema": SCHEMA, "strict": True},
    }
    assert "tools" not in OpenAIClient("http://x/v1", "m").body(Prompt(text="hi"))
    assert response_format("n", {"type": "object"})["json_schema"]["strict"] is True


def test_tools_and_schema_files_are_checked(tmp_path: Path) -> None:
    for bad in ({"type": "function"}, [], [{"type": "function", "function": {}}], [{"function": {"name": "x"}}]):
        with pytest.raises(InvalidInput) as err:
            check_tools(bad, "t.json")
        assert err.value.param == "tools"
    with pytest.raises(InvalidInput, match="not a valid JSON Schema"):
        check_tools([{"type": "function", "function": {"name": "f", "parameters": {"type": 12}}}], "t.json")
    assert tool_choice("search", TOOLS) == {"type": "function", "function": {"name": "search"}}
    assert tool_choice("required", TOOLS) == "required"
    with pytest.raises(InvalidInput) as err:
        tool_choice("nope", TOOLS)
    assert err.value.param == "tool_choice"
    path = tmp_path / "person.json"
    path.write_bytes(orjson.dumps({**SCHEMA, "title": "a person!"}))
    assert read_schema(str(path))[0] == "a_person_"
    path.write_text('{"type": "objekt"}')
    with pytest.raises(InvalidInput) as err:
        read_schema(str(path))
    assert err.value.param == "response_format"


@pytest.mark.parametrize(
    ("content", "args", "flag"),
    [
        ('{"type": "function"}', ["--tools", "{f}"], "--tools"),
        ("not json", ["--tools", "{f}"], "--tools"),
        (json.dumps(TOOLS), ["--tools", "{f}", "--api", "completions"], "--tools"),
        (json.dumps(TOOLS), ["--tools", "{f}", "--tool-choice", "nope"], "--tool-choice"),
        (json.dumps(TOOLS), ["--tool-choice", "auto"], "--tool-choice"),
        ('{"type": "objekt"}', ["--response-format", "{f}"], "--response-format"),
        ("[1, 2", ["--response-format", "{f}"], "--response-format"),
        (json.dumps(SCHEMA), ["--response-format", "{f}", "--api", "completions"], "--response-format"),
    ],
)
def test_bad_tools_and_schemas_exit_2_naming_the_flag(
    tmp_path: Path, content: str, args: list[str], flag: str, capsys: pytest.CaptureFixture[str]
) -> None:
    f = tmp_path / "file.json"
    f.write_text(content)
    code, _, err = in_process(capsys, "bench", "--url", UNREACHABLE, "--requests", "2", *[a.format(f=f) for a in args])
    assert code == 2 and err.startswith(f"error: {flag}"), err
    assert len(err.strip().splitlines()) == 1 and "127.0.0.1:9" not in err


def _bench(server: Any, out: Path, *args: str) -> dict[str, Any]:
    p = tokenrace("bench", "--url", server.url, "--requests", "6", "--concurrency", "2", "-o", str(out), *args)
    assert p.returncode in (0, 1), p.stderr
    summary: dict[str, Any] = json.loads((out / "summary.json").read_text())
    return summary


@pytest.mark.slow
def test_bench_summarizes_tool_calls_and_schema_validity(server: Any, tmp_path: Path) -> None:
    tools, schema = tmp_path / "tools.json", tmp_path / "person.json"
    tools.write_text(json.dumps(TOOLS))
    schema.write_text(json.dumps(SCHEMA))
    fake = '{"fake": {"tool_calls": 1, "output_tokens": 5}}'
    s = _bench(server, tmp_path / "tools", "--tools", str(tools), "--tool-choice", "search", "--extra-body", fake)
    assert s["tools"]["requests"] == 6 and s["tools"]["tool_calls"] == 6 and s["tools"]["requests_with_tool_calls"] == 6
    assert s["tools"]["ttft_tool_ms"]["p50"] >= 60 and s["schema_valid_rate"] is None and s["structured_output"] is None
    records = [json.loads(x) for x in (tmp_path / "tools" / "records.jsonl").read_text().splitlines()]
    assert all(r["tool_calls"] == 1 and r["ttft_tool_ms"] is not None for r in records)
    for answer, rate in ((VALID, 1.0), (INVALID, 0.0)):
        out = tmp_path / f"schema-{rate}"
        s = _bench(
            server, out, "--response-format", str(schema), "--extra-body", json.dumps({"fake": {"answer": answer}})
        )
        assert s["schema_valid_rate"] == rate and s["structured_output"]["checked"] == 6
    out = tmp_path / "failed"
    s = _bench(server, out, "--response-format", str(schema), "--extra-body", '{"fake": {"fault": "500"}}')
    assert s["requests"]["failed"] == 6 and s["schema_valid_rate"] is None  # nothing was checked: null, not 0
    assert s["structured_output"]["checked"] == 0


@pytest.mark.slow
def test_the_headline_speaks_of_tools_and_the_schema(server: Any, tmp_path: Path) -> None:

    schema = tmp_path / "person.json"
    schema.write_text(json.dumps(SCHEMA))
    fake = json.dumps({"fake": {"answer": VALID}})
    lines = headline_lines(
        Summary.model_validate(_bench(server, tmp_path / "r", "--response-format", str(schema), "--extra-body", fake))
    )
    assert any(line.startswith("response schema: 100.0 % valid (6 of 6") for line in lines), lines


def test_tools_and_schema_on_the_responses_api(server: Any) -> None:
    server.reset()
    recs = run(_send(server.base_url, 2, {"tool_calls": 2}, api="responses", tools=TOOLS, tool_choice="search"))
    log = server.log(wait_idle_s=2)
    for r in recs:
        assert r.ok, r.error_message
        assert r.tool_calls == 2 and len(r.chunk_ns) == 12 and r.output_tokens == 12
        sent = [c for c in next(e for e in log if e["id"] == r.response_id)["chunks"] if c["kind"] == "tool"]
        assert r.first_tool_ns is not None and 0 <= (r.first_tool_ns - sent[0]["t_ns"]) / 1e6 < 20
        assert r.reasoning_chunks == 0 and r.first_answer_ns is None
    body = OpenAIClient(
        "http://x/v1",
        "m",
        options=RequestOptions(
            api="responses",
            tools=TOOLS,
            tool_choice={"type": "function", "function": {"name": "search"}},
            response_schema=SCHEMA,
            response_schema_name="person",
        ),
    ).body(Prompt(text="hi"))
    assert body["tools"] == [{"type": "function", **TOOLS[0]["function"]}]
    assert body["tool_choice"] == {"type": "function", "name": "search"}
    assert body["text"] == {"format": {"type": "json_schema", "name": "person", "schema": SCHEMA, "strict": True}}
    for stream in (True, False):
        for answer, expected in ((VALID, True), (INVALID, False)):
            recs = run(
                _send(server.base_url, 1, {"answer": answer}, api="responses", stream=stream, response_schema=SCHEMA)
            )
            assert recs[0].ok and recs[0].schema_valid is expected, (stream, answer, recs[0].text)
    whole = run(
        _send(server.base_url, 1, {"tool_calls": 3, "output_tokens": 6}, api="responses", stream=False, tools=TOOLS)
    )
    assert whole[0].ok and whole[0].tool_calls == 3


@pytest.mark.slow
def test_bench_on_the_responses_api_counts_tool_calls(server: Any, tmp_path: Path) -> None:
    tools = tmp_path / "tools.json"
    tools.write_text(json.dumps(TOOLS))
    fake = '{"fake": {"tool_calls": 2, "output_tokens": 6}}'
    s = _bench(server, tmp_path / "r", "--api", "responses", "--tools", str(tools), "--extra-body", fake)
    assert s["requests"]["succeeded"] == 6 and s["tools"]["tool_calls"] == 12
    assert s["tools"]["ttft_tool_ms"]["p50"] >= 60
