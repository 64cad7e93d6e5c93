"""Reading the gateway's YAML file: validation errors located by line, and the checks across sections.

`load_config(path)` returns a validated `GatewayConfig` or raises `ConfigError`, whose lines read
like `gateway.yaml:12:7: routes[0].backends[1].weight: must be >= 0` (line and column, as compilers
write them). The positions come from `yamlpos`; the schema is `config.schema`.
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Mapping
from pathlib import Path as FsPath
from types import UnionType
from typing import Any, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError

from tokenrace.errors import UsageError
from tokenrace.gateway.config.schema import GatewayConfig, RouteConfig
from tokenrace.gateway.yamlpos import Path, Position, YamlError, format_path, line_of, load_with_lines
from tokenrace.redact import Redactor


class ConfigError(UsageError):
    """An invalid gateway configuration. `problems` holds one located line per problem."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        more = f" (and {len(problems) - 1} more; `tokenrace gateway check` lists them)" if len(problems) > 1 else ""
        super().__init__(problems[0] + more)


def load_config(path: str | FsPath, env: Mapping[str, str] | None = None, check_env: bool = True) -> GatewayConfig:
    """Read, validate and cross-check a gateway YAML file. Raises ConfigError (located lines)."""
    name = str(path)
    try:
        text = FsPath(path).read_text()
    except OSError as exc:
        raise ConfigError([f"{name}: cannot read: {exc.strerror or exc}"]) from None
    return parse_config(text, name, os.environ if env is None else env, check_env)


def parse_config(
    text: str, name: str = "<config>", env: Mapping[str, str] | None = None, check_env: bool = True
) -> GatewayConfig:
    try:
        data, lines = load_with_lines(text)
    except YamlError as exc:
        raise ConfigError([_located(name, exc.position, str(exc))]) from None
    if not isinstance(data, dict):
        raise ConfigError([f"{name}:1:1: the file must be a mapping with backends: and routes:"])
    try:
        config = GatewayConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_pydantic_problems(exc, name, lines)) from None
    problems = [_located(name, line_of(p, lines), f"{format_path(p)}: {m}") for p, m in cross_check(config, data)]
    if check_env:
        problems += [
            _located(name, line_of(p, lines), f"{format_path(p)}: {m}") for p, m in missing_env(config, env or {})
        ]
    if problems:
        raise ConfigError(problems)
    return config


_SCRUB = Redactor()


def _located(name: str, position: Position | None, message: str) -> str:
    # Values are echoed to help, but anything shaped like a key is masked.
    message = _SCRUB(message)
    return f"{name}:{position[0]}:{position[1]}: {message}" if position is not None else f"{name}: {message}"


def _pydantic_problems(exc: ValidationError, name: str, lines: dict[Path, Position]) -> list[str]:
    out = []
    for err in exc.errors():
        path = _clean_loc(err["loc"])
        where = format_path(path)
        message = _friendly(err, path)
        out.append(_located(name, line_of(path, lines), f"{where}: {message}" if where else message))
    return out


def _clean_loc(loc: tuple[Any, ...]) -> Path:
    """pydantic adds union member names (`str`, `list[str]`) and validator tags to locations."""
    out: list[str | int] = []
    for part in loc:
        if isinstance(part, int):
            out.append(part)
        elif isinstance(part, str) and not re.match(r"^(str|int|float|bool|list\[.*\]|dict\[.*\]|function-.*)$", part):
            out.append(part)
    return tuple(out)


_MISSING_HINTS: dict[Path, str] = {
    ("auth",): "required: list client keys (auth: {keys: [{name: app, key_env: APP_API_KEY}]}), "
    "or write `auth: {required: false}` to serve without them",
}


def _friendly(err: Any, path: Path) -> str:
    kind, ctx, value = err["type"], err.get("ctx") or {}, err.get("input")
    if kind == "missing":
        return _MISSING_HINTS.get(path, "required")
    if kind == "extra_forbidden":
        options = _fields_at(path[:-1])
        close = difflib.get_close_matches(str(path[-1]), options, n=1, cutoff=0.6) if options else []
        hint = f"did you mean {close[0]!r}?" if close else f"allowed: {', '.join(options)}"
        return f"unknown key ({hint})"
    bounds = {"greater_than_equal": ">=", "greater_than": ">", "less_than_equal": "<=", "less_than": "<"}
    if kind in bounds:
        limit = next(iter(ctx.values()))
        return f"must be {bounds[kind]} {limit:g} (got {value!r})"
    if kind in ("int_type", "int_parsing", "int_from_float"):
        return f"must be an integer (got {value!r})"
    if kind in ("float_type", "float_parsing"):
        return f"must be a number (got {value!r})"
    if kind in ("bool_type", "bool_parsing"):
        return f"must be true or false (got {value!r})"
    if kind == "string_type":
        return f"must be text (got {value!r})"
    if kind in ("dict_type", "model_type", "model_attributes_type"):
        return f"must be a mapping (got {value!r})"
    if kind == "list_type":
        return f"must be a list (got {value!r})"
    if kind == "literal_error":
        return f"must be one of {ctx.get('expected')} (got {value!r})"
    if kind == "too_short":
        return "must not be empty"
    return str(err["msg"]).removeprefix("Value error, ")


def cross_check(config: GatewayConfig, data: dict[str, Any]) -> list[tuple[Path, str]]:
    """References between sections: every named backend exists, models are unique, and so on."""
    problems: list[tuple[Path, str]] = []
    known = set(config.backends)
    models: dict[str, int] = {}
    for i, route in enumerate(config.routes):
        here: Path = ("routes", i)
        if route.model in models:
            problems.append((here + ("model",), f"{route.model!r} is already routed by routes[{models[route.model]}]"))
        models.setdefault(route.model, i)
        problems += _unknown_backends(route, here, known)
        if route.canary is not None:
            baseline = {n for t in route.backends for n in t.names}
            overlap = sorted(baseline & set(route.canary.names))
            if overlap:
                problems.append(
                    (here + ("canary", "backend"), f"{overlap[0]!r} is also a baseline backend of this route")
                )
    return problems


def _unknown_backends(route: RouteConfig, here: Path, known: set[str]) -> list[tuple[Path, str]]:
    refs: list[tuple[Path, str]] = []
    for j, target in enumerate(route.backends):
        if isinstance(target.backend, str):
            refs.append((here + ("backends", j, "backend"), target.backend))
        else:
            refs += [(here + ("backends", j, "backend", k), n) for k, n in enumerate(target.backend)]
    refs += [(here + ("fallback", k), n) for k, n in enumerate(route.fallback or [])]
    if route.canary is not None:
        names = route.canary.names
        refs += [(here + ("canary", "backend") + ((k,) if len(names) > 1 else ()), n) for k, n in enumerate(names)]
    if route.shadow is not None:
        refs.append((here + ("shadow", "backend"), route.shadow.backend))
    hint = ", ".join(sorted(known))
    return [(p, f"unknown backend {n!r} (defined: {hint})") for p, n in refs if n not in known]


def missing_env(config: GatewayConfig, env: Mapping[str, str]) -> list[tuple[Path, str]]:
    """Environment variables the file names but the environment lacks (or holds empty)."""
    wanted: list[tuple[Path, str]] = []
    for name, backend in config.backends.items():
        if backend.api_key_env:
            wanted.append((("backends", name, "api_key_env"), backend.api_key_env))
    for i, key in enumerate(config.auth.keys):
        if key.key_env:
            wanted.append((("auth", "keys", i, "key_env"), key.key_env))
    if config.admin is not None and config.admin.key_env:
        wanted.append((("admin", "key_env"), config.admin.key_env))
    if config.state is not None:
        wanted.append((("state", "redis_url_env"), config.state.redis_url_env))
    return [(p, f"environment variable {v} is not set") for p, v in wanted if not env.get(v)]


def _fields_at(path: Path) -> list[str]:
    """The keys allowed at `path` of the schema (for "did you mean" hints)."""
    node: Any = GatewayConfig
    for part in path:
        node = _step(node, part)
        if node is None:
            return []
    model = _model_in(node)
    return list(model.model_fields) if model is not None else []


def _step(node: Any, part: str | int) -> Any:
    model = _model_in(node)
    if model is not None:
        info = model.model_fields.get(part) if isinstance(part, str) else None
        return info.annotation if info is not None else None
    containers = [node, *get_args(node)]
    for candidate in containers:
        if get_origin(candidate) in (list, dict):
            return get_args(candidate)[-1]
    return None


def _model_in(node: Any) -> type[BaseModel] | None:
    if isinstance(node, type) and issubclass(node, BaseModel):
        return node
    if get_origin(node) not in (Union, UnionType):
        return None
    for arg in get_args(node):
        if isinstance(arg, type) and issubclass(arg, BaseModel):
            return arg
    return None
