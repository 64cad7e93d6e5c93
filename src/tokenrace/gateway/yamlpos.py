"""YAML that remembers where each value came from.

`load_with_lines(text)` returns the data (as `yaml.safe_load` would) and a map from key paths such
as `("routes", 0, "backends", 1, "weight")` to 1-based (line, column) positions, so that a
validation error can say `gateway.yaml:12:7: routes[0].backends[1].weight: must be >= 0`. Duplicate mapping keys, which
PyYAML silently collapses to the last one, are reported as errors with both lines.
"""

from __future__ import annotations

from typing import Any, TypeAlias

import yaml

Path: TypeAlias = tuple[str | int, ...]
Position: TypeAlias = tuple[int, int]  # 1-based line and column


class YamlError(ValueError):
    """Unreadable YAML. `line` is 1-based (None when unknown); str() has no position prefix."""

    def __init__(self, message: str, line: int | None, column: int | None = None) -> None:
        super().__init__(message)
        self.line = line
        self.column = column

    @property
    def position(self) -> Position | None:
        return (self.line, self.column or 1) if self.line is not None else None


def load_with_lines(text: str) -> tuple[Any, dict[Path, Position]]:
    """Parse one YAML document into plain data plus the position of every key path."""
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line, column = (mark.line + 1, mark.column + 1) if mark is not None else (None, None)
        raise YamlError(str(exc.problem or exc.context or "cannot parse YAML"), line, column) from None
    except yaml.YAMLError as exc:
        raise YamlError(f"cannot parse YAML: {exc}", None) from None
    if node is None:
        return None, {}
    lines: dict[Path, Position] = {}
    _index(node, (), lines)
    # Constructing from the same text keeps the types (ints, floats, bools) exactly as PyYAML reads them.
    return yaml.safe_load(text), lines


def _position(node: yaml.Node) -> Position:
    return node.start_mark.line + 1, node.start_mark.column + 1


def _index(node: yaml.Node, path: Path, lines: dict[Path, Position]) -> None:
    lines[path] = _position(node)
    if isinstance(node, yaml.MappingNode):
        seen: dict[str, int] = {}
        for key_node, value_node in node.value:
            key = str(key_node.value)
            line, column = _position(key_node)
            if key in seen:
                where = format_path(path + (key,))
                raise YamlError(f"{where}: duplicate key (first on line {seen[key]})", line, column)
            seen[key] = line
            lines[path + (key,)] = (line, column)
            _index_value(value_node, path + (key,), lines)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _index(item, path + (i,), lines)


def _index_value(node: yaml.Node, path: Path, lines: dict[Path, Position]) -> None:
    """Like _index, but a scalar value keeps its key's position (the key is what a reader looks for)."""
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


def line_of(path: Path, lines: dict[Path, Position]) -> Position | None:
    """The position of the deepest known prefix of `path` (a missing key points at its parent)."""
    for end in range(len(path), -1, -1):
        line = lines.get(path[:end])
        if line is not None:
            return line
    return None
