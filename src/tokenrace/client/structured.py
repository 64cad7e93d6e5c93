"""Tools and structured output: the files that define them, checked, and the answer's validation.

- A tools file is an OpenAI tools list: `[{"type": "function", "function": {"name", "description"?,
  "parameters"?}}]`, each `parameters` a JSON Schema.
- A response-format file is a JSON Schema; the request asks for it as OpenAI's
  `response_format: {type: json_schema, json_schema: {name, schema, strict: true}}` (vLLM, SGLang and
  llama.cpp take the same shape). Every answer is then parsed as JSON and validated against it with
  the jsonschema package, after the request ended (never inside a timed section).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal, NotRequired, TypeAlias, TypedDict

import orjson
from pydantic import JsonValue

from tokenrace.errors import InvalidInput

TOOL_CHOICES = ("auto", "none", "required")
# The APIs whose requests can offer tools and ask for a response format.
STRUCTURED_APIS = ("chat", "responses")
_NAME = re.compile(r"[^a-zA-Z0-9_-]")

# A JSON Schema document: an object, or true / false (accept anything / nothing).
JsonSchema: TypeAlias = dict[str, JsonValue] | bool


class Function(TypedDict):
    name: str
    description: NotRequired[str]
    parameters: NotRequired[JsonSchema]
    strict: NotRequired[bool]


class Tool(TypedDict):
    """One entry of an OpenAI tools list."""

    type: Literal["function"]
    function: Function


class FunctionName(TypedDict):
    name: str


class NamedToolChoice(TypedDict):
    """`tool_choice` forcing one function."""

    type: Literal["function"]
    function: FunctionName


ToolChoice: TypeAlias = str | NamedToolChoice  # auto | none | required, or a function to call


class JsonSchemaFormat(TypedDict):
    name: str
    schema: JsonSchema
    strict: bool


class ResponseFormat(TypedDict):
    """OpenAI's `response_format` asking for JSON that meets a schema."""

    type: Literal["json_schema"]
    json_schema: JsonSchemaFormat


def _read_json(path: str, param: str) -> Any:
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise InvalidInput(param, f"cannot read {path}: {exc.strerror}") from None
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise InvalidInput(param, f"{path} is not JSON ({exc})") from None


def check_schema(schema: Any, param: str, where: str) -> None:
    """InvalidInput unless `schema` is a JSON Schema (jsonschema's check_schema for its draft)."""
    from jsonschema import SchemaError  # noqa: PLC0415 - import cost: jsonschema only when a schema is asked for
    from jsonschema.validators import validator_for  # noqa: PLC0415 - import cost: jsonschema only when a schema is asked for

    if not isinstance(schema, dict | bool):
        raise InvalidInput(param, f"{where} is not a JSON Schema (expected an object)")
    try:
        validator_for(schema).check_schema(schema)
    except SchemaError as exc:
        raise InvalidInput(param, f"{where} is not a valid JSON Schema: {exc.message}") from None


def check_tools(tools: Any, where: str) -> list[Tool]:
    """The tools list, each tool checked; InvalidInput naming the first that is wrong."""
    if not isinstance(tools, list) or not tools:
        raise InvalidInput("tools", f"{where} is not a JSON list of tools (OpenAI's tools shape)")
    checked: list[Tool] = []
    for i, tool in enumerate(tools):
        _check_tool(tool, i, where)
        checked.append(tool)
    return checked


def _check_tool(tool: Any, i: int, where: str) -> None:
    """InvalidInput unless `tool` is a function tool with a name and, when it has parameters, a
    JSON Schema for them."""
    fn = tool.get("function") if isinstance(tool, dict) else None
    if not isinstance(tool, dict) or tool.get("type") != "function" or not isinstance(fn, dict):
        raise InvalidInput("tools", f'{where}: tool {i} is not {{"type": "function", "function": {{...}}}}')
    if not isinstance(fn.get("name"), str) or not fn["name"]:
        raise InvalidInput("tools", f"{where}: tool {i} has no function name")
    if "parameters" in fn:
        check_schema(fn["parameters"], "tools", f"{where}: the parameters of tool {i} ({fn['name']})")


def read_tools(path: str) -> list[Tool]:
    return check_tools(_read_json(path, "tools"), path)


def tool_choice(value: str, tools: list[Tool] | None) -> ToolChoice:
    """`auto`, `none`, `required`, or a tool's name (forces that function)."""
    if tools is None:
        raise InvalidInput("tool_choice", "chooses among tools: give a tools file too")
    if value in TOOL_CHOICES:
        return value
    names = [t["function"]["name"] for t in tools]
    if value not in names:
        raise InvalidInput(
            "tool_choice", f"{value!r} is none of auto, none, required or a tool's name ({', '.join(names)})"
        )
    return {"type": "function", "function": {"name": value}}


def read_schema(path: str) -> tuple[str, JsonSchema]:
    """(name, schema) from a JSON Schema file; the name is its `title`, else the file's stem."""
    schema = _read_json(path, "response_format")
    check_schema(schema, "response_format", path)
    title = schema.get("title") if isinstance(schema, dict) else None
    name = _NAME.sub("_", title if isinstance(title, str) and title else Path(path).stem)[:64]
    return name or "answer", schema


def response_format(name: str, schema: JsonSchema) -> ResponseFormat:
    """OpenAI's structured-output request field for `schema`."""
    return {"type": "json_schema", "json_schema": {"name": name, "schema": schema, "strict": True}}


def schema_checker(schema: JsonSchema) -> Callable[[str], bool]:
    """A function telling whether an answer's text is JSON that `schema` accepts."""
    from jsonschema.validators import validator_for  # noqa: PLC0415 - import cost: jsonschema only when a schema is asked for

    validator = validator_for(schema)(schema)

    def valid(text: str) -> bool:
        try:
            value = orjson.loads(text)
        except orjson.JSONDecodeError:
            return False
        return bool(validator.is_valid(value))

    return valid
