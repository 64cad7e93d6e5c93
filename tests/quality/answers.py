"""A reference answer and a wrong answer for any built-in check (the tests' oracle)."""

from __future__ import annotations

import json
from typing import Any

from tokenrace.quality.checkers import ExactCheck, JsonSchemaCheck, LinesCheck, ListCheck, NumberCheck


def right_answer(check: Any) -> str:
    if isinstance(check, NumberCheck):
        return check.value
    if isinstance(check, ListCheck):
        return ", ".join(check.items)
    if isinstance(check, ExactCheck):
        return check.text
    if isinstance(check, JsonSchemaCheck):
        props: Any = check.json_schema["properties"]
        return json.dumps({k: v["const"] for k, v in props.items()})
    if isinstance(check, LinesCheck):
        return "\n".join(f"word {i}" for i in range(check.count))
    raise TypeError(type(check))


def wrong_answer(check: Any) -> str:
    if isinstance(check, NumberCheck):
        return str(int(check.value) + 1)
    if isinstance(check, ListCheck):
        return ", ".join(reversed(check.items))
    if isinstance(check, ExactCheck):
        return check.text[:-1]
    if isinstance(check, JsonSchemaCheck):
        props: Any = check.json_schema["properties"]
        values = {k: v["const"] for k, v in props.items()}
        values["age"] = values["age"] + 1
        return json.dumps(values)
    if isinstance(check, LinesCheck):
        return "\n".join(f"word {i}" for i in range(check.count + 1))
    raise TypeError(type(check))
