"""Tool calls in the fake server's answers: OpenAI's streamed chat shape and the Responses API's.

A request that offers `tools`, to a server configured with `tool_calls: K`, is answered with K calls
of the first offered (or the forced) function. The output tokens are shared among the calls, and
each call's arguments are a JSON object `{"q": "w0 w1 ... "}` streamed one token per chunk.

- Chat: the first chunk of a call carries its index, id, type and name with its first token, as vLLM
  and OpenAI send them; the last chunk says `finish_reason: "tool_calls"`.
- Responses: `response.output_item.added` (a `function_call` item with its name) before a call's
  first `response.function_call_arguments.delta`; the final response lists the calls as
  `function_call` output items with their whole arguments.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

Json = dict[str, Any]


def offered_tool(body: Json) -> str | None:
    """The function the answer calls: the forced one (`tool_choice`), else the first offered; None
    when the request offers no tools or forbids calling them."""
    tools = body.get("tools")
    if not isinstance(tools, list) or not tools:
        return None
    choice = body.get("tool_choice")
    if choice == "none":
        return None
    if isinstance(choice, dict):
        name = (choice.get("function") or {}).get("name") or choice.get("name")
        if isinstance(name, str):
            return name
    first = tools[0] if isinstance(tools[0], dict) else {}
    name = (first.get("function") or {}).get("name") or first.get("name")
    return name if isinstance(name, str) else "tool"


def call_sizes(tokens: int, calls: int) -> list[int]:
    """Tokens of each call: `tokens` shared as evenly as possible, every call at least one."""
    calls = max(1, min(calls, tokens))
    return [tokens // calls + (1 if i < tokens % calls else 0) for i in range(calls)]


def argument_pieces(first_token: int, size: int) -> list[str]:
    """The arguments of one call, one piece per token: `{"q": "wF ` ... `wL "}`."""
    pieces = [f"w{first_token + j} " for j in range(size)]
    pieces[0] = '{"q": "' + pieces[0]
    pieces[-1] += '"}'
    return pieces


def tool_deltas(name: str, tokens: int, calls: int) -> Iterator[tuple[Json, int]]:
    """(delta, index of the token it carries) for every streamed piece of every call."""
    token = 0
    for index, size in enumerate(call_sizes(tokens, calls)):
        for j, piece in enumerate(argument_pieces(token, size)):
            call: Json = {"index": index, "function": {"arguments": piece}}
            if j == 0:
                call = {
                    "index": index,
                    "id": f"call_{index}",
                    "type": "function",
                    "function": {"name": name, "arguments": piece},
                }
            yield {"tool_calls": [call]}, token
            token += 1


def responses_tool_events(name: str, tokens: int, calls: int) -> Iterator[tuple[Json, int]]:
    """(the events carrying one argument piece, the index of its token) in the Responses shape."""
    token = 0
    for index, size in enumerate(call_sizes(tokens, calls)):
        item_id = f"fc_{index}"
        for j, piece in enumerate(argument_pieces(token, size)):
            delta = {"type": "response.function_call_arguments.delta", "item_id": item_id, "output_index": index}
            events = [{**delta, "delta": piece}]
            if j == 0:
                item = {"id": item_id, "type": "function_call", "call_id": f"call_{index}", "name": name}
                added = {"type": "response.output_item.added", "output_index": index, "item": {**item, "arguments": ""}}
                events.insert(0, added)
            yield {"events": events}, token
            token += 1


def responses_tool_items(name: str, tokens: int, calls: int) -> list[Json]:
    """The calls as a finished response's `function_call` output items."""
    return [
        {
            "id": f"fc_{i}",
            "type": "function_call",
            "status": "completed",
            "call_id": call["id"],
            "name": name,
            "arguments": call["function"]["arguments"],
        }
        for i, call in enumerate(tool_message(name, tokens, calls))
    ]


def tool_message(name: str, tokens: int, calls: int) -> list[Json]:
    """The `tool_calls` of a non-streamed message carrying the same calls."""
    out, token = [], 0
    for index, size in enumerate(call_sizes(tokens, calls)):
        arguments = "".join(argument_pieces(token, size))
        out.append({"id": f"call_{index}", "type": "function", "function": {"name": name, "arguments": arguments}})
        token += size
    return out
