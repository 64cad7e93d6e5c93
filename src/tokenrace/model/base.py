"""What every saved-file model shares: unknown keys are kept when read and refused when written."""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict

JsonObject = dict[str, Any]

# Written into records.jsonl lines, summary.json, manifest.json, sweep.json and profile.json.
SCHEMA_VERSION = 2  # 2: warnings are typed (code, message, figures) in one list


class _Model(BaseModel):
    # Unknown keys are kept (a newer tokenrace may add fields; an older reader must not lose them).
    model_config = ConfigDict(extra="allow", populate_by_name=True)


M = TypeVar("M", bound=BaseModel)


def checked_for_writing(model: M) -> M:
    """The model, once no key it holds at any depth is unknown to its class: what tokenrace writes is
    exactly what its models declare (extra="forbid" on the way out), while reading stays lenient so
    that a newer file's additions survive an older reader. A misspelt key fails here, before the file."""
    unknown = _unknown_keys(model, "")
    if unknown:
        raise ValueError(f"{type(model).__name__} holds keys its model does not declare: {', '.join(unknown)}")
    return model


def _unknown_keys(value: object, where: str) -> list[str]:
    if isinstance(value, BaseModel):
        out = [f"{where}{k}" for k in value.model_extra or {}]
        for name in type(value).model_fields:
            out += _unknown_keys(getattr(value, name), f"{where}{name}.")
        return out
    if isinstance(value, (list, tuple)):
        return [k for i, item in enumerate(value) for k in _unknown_keys(item, f"{where}{i}.")]
    return []
