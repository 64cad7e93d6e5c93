"""YAML that remembers where each value came from.

`load_with_lines(text)` returns the data (as `yaml.safe_load` would) and a map from key paths such
as `("routes", 0, "backends", 1, "weight")` to 1-based line numbers, so that a validation error can
say `gateway.yaml:12: routes[0].backends[1].weight: must be >= 0`. Duplicate mapping keys, which
PyYAML silently collapses to the last one, are reported as errors with both lines.
"""

from __future__ import annotations

from typing import Any, TypeAlias

import yaml

Path: TypeAlias = tuple[str | int, ...]


class YamlError(ValueError):
    """Unreadable YAML. `line` is 1-based (None when unknown); str() has no position prefix."""

    def __init__(self, message: str, line: int | None) -> None:
        super().__init__(message)
        self.line = line


def load_with_lines(text: str) -> tuple[Any, dict[Path, int]]:
    """Parse one YAML document into plain data plus the line of every key path."""
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else None
        raise YamlError(str(exc.problem or exc.context or "cannot parse YAML"), line) from None
    except yaml.YAMLError as exc:
        raise YamlError(f"cannot parse YAML: {exc}", None) from None
    if node is None:
        return None, {}
    lines: dict[Path, int] = {}
    _index(node, (), lines)
    # Constructing from the same text keeps the types (ints, floats, bools) exactly as PyYAML reads them.
    return yaml.safe_load(text), lines


def _index(node: yaml.Node, path: Path, lines: dict[Path, int]) -> None:
    lines[path] = node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        seen: dict[str, int] = {}
        for key_node, value_node in node.value:
            key = str(key_node.value)
            line = key_node.start_mark.line + 1
            if key in seen:
                where = format_path(path + (key,))
                raise YamlError(f"{where}: duplicate key (first on line {seen[key]})", line)
            seen[key] = line
            lines[path + (key,)] = line
            _index_value(value_node, path + (key,), lines)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _index(item, path + (i,), lines)


def _index_value(node: yaml.Node, path: Path, lines: dict[Path, int]) -> None:
    """Like _index, but a scalar value keeps its key's line (the key is what a reader looks for)."""
    key_line = lines[path]
    _index(node, path, lines)
    if isinstance(node, yaml.ScalarNode):
        lines[path] = key_line


def format_path(path: Path) -> str:
    """`("routes", 0, "backends")` -> `routes[0].backends`."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def line_of(path: Path, lines: dict[Path, int]) -> int | None:
    """The line of the deepest known prefix of `path` (a missing key points at its parent)."""
    for end in range(len(path), -1, -1):
        line = lines.get(path[:end])
        if line is not None:
            return line
    return None
