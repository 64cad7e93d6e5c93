"""OpenAI Responses API: POST `/responses` with `stream: true`.

The stream is typed events (`data.type`): content is `response.output_text.delta`, reasoning any
`response.reasoning*.delta` (`reasoning_text` from vLLM and gpt-oss servers, `reasoning_summary_text`
from OpenAI), tool-call text `response.function_call_arguments.delta` (counted like chat's tool
deltas). The stream ends with `response.completed`, or `response.incomplete` when
`max_output_tokens` cut it, either carrying `usage` (`input_tokens`, `output_tokens`,
`input_tokens_details.cached_tokens`); `response.failed` and `error` events are failures.
"""

from __future__ import annotations

from typing import Any

from tokenrace.client.apis.base import Api, body_object, count
from tokenrace.client.conversation import Content
from tokenrace.client.images import ResponsesPart, responses_part
from tokenrace.client.records import cached_tokens_of
from tokenrace.client.request import Prompt, RequestSpec
from tokenrace.client.stream import StreamReader
from tokenrace.client.structured import Tool, ToolChoice, response_format
from tokenrace.model.records import RequestRecord, Usage

END_EVENTS = ("response.completed", "response.incomplete")


def content_parts(content: Content) -> str | list[ResponsesPart]:
    """A chat message's content as Responses input: typed text parts become `input_text`, image
    parts `input_image` (the same data URL)."""
    if not isinstance(content, list):
        return content
    return [responses_part(p) for p in content]


def input_items(prompt: Prompt) -> list[dict[str, Any]]:
    """The request's `input`: its messages as Responses message items (system roles kept)."""
    return [{**m, "content": content_parts(m["content"])} for m in prompt.as_messages()]


class ResponsesApi(Api):
    name = "responses"
    path = "responses"

    def body(self, spec: RequestSpec) -> dict[str, Any]:
        o = spec.options
        b: dict[str, Any] = {"model": spec.model, "input": input_items(spec.prompt), "stream": o.stream}
        if spec.max_tokens is not None:
            b["max_output_tokens"] = spec.max_tokens
        if o.tools is not None:
            b["tools"] = [responses_tool(t) for t in o.tools]
            if o.tool_choice is not None:
                b["tool_choice"] = responses_tool_choice(o.tool_choice)
        if o.response_schema is not None:
            fmt = response_format(o.response_schema_name, o.response_schema)["json_schema"]
            b["text"] = {"format": {"type": "json_schema", **fmt}}
        # The Responses API takes no seed (OpenAI refuses unknown parameters); usage always comes.
        b.update(spec.sampling(seed=False))
        b.update(o.extra_body)
        return b

    def stream_reader(self, rec: RequestRecord) -> StreamReader:
        return ResponsesReader(rec)

    def structured_reader(self, rec: RequestRecord) -> StreamReader:
        return StructuredResponsesReader(rec)

    def structured_body(self, obj: Any) -> tuple[str, int]:
        output = obj.get("output") if isinstance(obj, dict) else None
        answer, _ = output_text(output)
        calls = [i for i in output or [] if isinstance(i, dict) and i.get("type") == "function_call"]
        return answer, len(calls)

    def read_body(self, rec: RequestRecord, raw: Any) -> None:
        obj = body_object(rec, raw)
        if obj is None:
            return
        rec.response_id = rec.response_id or obj.get("id")
        answer, reasoning = output_text(obj.get("output"))
        calls = [i for i in obj.get("output") or [] if isinstance(i, dict) and i.get("type") == "function_call"]
        rec.text = reasoning + answer + "".join(str(c.get("arguments") or "") for c in calls)
        _finish(rec, obj)


class ResponsesReader(StreamReader):
    __slots__ = ()
    end_mark = "response.completed"

    def on_event(self, data: str, t: int) -> None:
        obj = self.event_object(data)
        if obj is None:
            return
        kind = obj.get("type") or ""
        if kind == "response.output_text.delta":
            text = obj.get("delta") or ""
            if text:
                self.content(text, "", t)
        elif kind.endswith(".delta") and (
            kind.startswith("response.reasoning") or kind == "response.function_call_arguments.delta"
        ):
            text = obj.get("delta") or ""
            if text:
                self.content("", text, t)
        elif kind == "response.created":
            response = obj.get("response") or {}
            self.rec.response_id = self.rec.response_id or response.get("id")
        elif kind in END_EVENTS:
            self.done = True
            _finish(self.rec, obj.get("response") or {})
        elif kind == "response.failed":
            self.done = True
            error = (obj.get("response") or {}).get("error") or {}
            self.rec.fail("stream_error", f"response.failed: {error.get('message') or error or 'no message'}")
        elif kind == "error":
            self.rec.fail("stream_error", str(obj.get("message") or obj.get("error") or obj)[:300])


class StructuredResponsesReader(ResponsesReader):
    """A Responses stream that may carry function calls: each `function_call_arguments` delta is an
    output chunk stamped as a tool delta (not reasoning); the answer's text is kept for validation."""

    __slots__ = ("answer", "calls")

    def __init__(self, rec: RequestRecord) -> None:
        super().__init__(rec)
        self.answer: list[str] = []
        self.calls: set[Any] = set()

    def on_event(self, data: str, t: int) -> None:
        # The two delta kinds are handled here (parsed once); every other event as the plain reader does.
        if '"response.function_call_arguments.delta"' not in data and '"response.output_text.delta"' not in data:
            super().on_event(data, t)
            return
        obj = self.event_object(data)
        if obj is None:
            return
        text = obj.get("delta") or ""
        if not text:
            return
        if obj.get("type") == "response.output_text.delta":
            self.answer.append(text)
            self.content(text, "", t)
        else:
            self.calls.add(obj.get("item_id", obj.get("output_index")))
            self._tool(text, t)

    def _tool(self, text: str, t: int) -> None:
        rec = self.rec
        if not self.chunk_ns:
            self.first_token(t)
            if rec.on_first_token is not None:
                rec.on_first_token(t)
        if rec.first_tool_ns is None:
            rec.first_tool_ns = t
        self.chunk_ns.append(t)
        self.chunk_chars.append(len(text))
        self.pieces.append(text)

    def structured(self) -> tuple[str, int]:
        return "".join(self.answer), len(self.calls)


def responses_tool(tool: Tool) -> dict[str, Any]:
    """An OpenAI chat tool (`{"type": "function", "function": {...}}`) in the Responses API's flat
    shape (`{"type": "function", "name", "description", "parameters"}`)."""
    return {"type": "function", **tool["function"]}


def responses_tool_choice(choice: ToolChoice) -> str | dict[str, Any]:
    """`auto`, `none`, `required` as they are; a forced function as `{"type": "function", "name"}`."""
    if isinstance(choice, dict):
        return {"type": "function", "name": choice["function"]["name"]}
    return choice


def _finish(rec: RequestRecord, response: dict[str, Any]) -> None:
    """Usage and the finish reason from a finished response object."""
    rec.usage = usage_as_chat(response.get("usage"))
    rec.cached_tokens, rec.cached_tokens_source = cached_tokens_of(rec.usage, None)
    details = response.get("incomplete_details") or {}
    rec.finish_reason = details.get("reason") or response.get("status")


def usage_as_chat(usage: Any) -> Usage | None:
    """Responses usage in the chat shape the rest of tokenrace reads (`prompt_tokens`, ...)."""
    if not isinstance(usage, dict):
        return None
    out: Usage = {}
    if count(usage.get("input_tokens")) is not None:
        out["prompt_tokens"] = usage["input_tokens"]
    if count(usage.get("output_tokens")) is not None:
        out["completion_tokens"] = usage["output_tokens"]
    if count(usage.get("total_tokens")) is not None:
        out["total_tokens"] = usage["total_tokens"]
    cached = count((usage.get("input_tokens_details") or {}).get("cached_tokens"))
    if cached is not None:
        out["prompt_tokens_details"] = {"cached_tokens": cached}
    reasoning = count((usage.get("output_tokens_details") or {}).get("reasoning_tokens"))
    if reasoning is not None:
        out["completion_tokens_details"] = {"reasoning_tokens": reasoning}
    return out


def output_text(output: Any) -> tuple[str, str]:
    """(answer, reasoning) text of a whole response's `output` items."""
    answer: list[str] = []
    reasoning: list[str] = []
    for item in output if isinstance(output, list) else []:
        if not isinstance(item, dict):
            continue
        if item.get("type") == "message":
            answer += [p.get("text") or "" for p in item.get("content") or [] if isinstance(p, dict)]
        elif item.get("type") == "reasoning":
            parts = [*(item.get("content") or []), *(item.get("summary") or [])]
            reasoning += [p.get("text") or "" for p in parts if isinstance(p, dict)]
    return "".join(answer), "".join(reasoning)
