"""The token ids an engine will see for a request, for precise prefix routing (`kvblocks`).

The model's own tokenizer (a `tokenizer.json`, read by the `tokenizers` library) and, for chat, its
chat template (from `tokenizer_config.json` or `chat_template.jinja` beside it, rendered by jinja2
in a sandbox, as Hugging Face's `apply_chat_template` does and vLLM calls it): the messages with
`add_generation_prompt`, then the text tokenized without adding special tokens (the template writes
them). A completion's prompt string is tokenized with them, as vLLM does; a prompt given as token
ids is taken as it is. Nothing is downloaded: the files are the user's.

An engine that renders a template differently (another template, tools, content parts it joins
otherwise) gives other tokens from the point of difference on: the prefix before it still matches.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tokenrace.gateway.body import RequestBody

TOKENIZER_FILE = "tokenizer.json"


class TokenizerError(ValueError):
    """The tokenizer or its chat template cannot be read (the message says which file and why)."""


class PromptTokenizer:
    """The token ids of a request's prompt, as the engine serving the model would make them.

    `tokens` takes milliseconds for long prompts: the request path calls it on a worker thread."""

    def __init__(self, path: str | Path) -> None:
        from tokenizers import Tokenizer  # noqa: PLC0415 - import cost: tokenizers only for a pool that tokenizes

        where = Path(path)
        folder = where if where.is_dir() else where.parent
        file = where / TOKENIZER_FILE if where.is_dir() else where
        try:
            self._tok = Tokenizer.from_file(str(file))
        except Exception as exc:  # noqa: BLE001 - the tokenizers library raises its own Exception subclasses
            raise TokenizerError(f"{file}: cannot read it as a tokenizer.json ({str(exc)[:120]})") from None
        self.path = str(file)
        template, self._specials = _template_and_specials(folder / "tokenizer_config.json")
        jinja_file = folder / "chat_template.jinja"
        if template is None and jinja_file.is_file():
            template = jinja_file.read_text(encoding="utf-8")
        self._template: Any = None
        self.template_problem: str | None = None
        if isinstance(template, str):
            self._template = _compile(template)
        else:
            self.template_problem = f"no chat template beside {file}"

    def tokens(self, body: RequestBody) -> list[int] | None:
        """The prompt's token ids; None when there is no prompt the engine would tokenize this way."""
        messages = body.messages()
        if messages is not None:
            if self._template is None:
                return None
            try:
                text = self._template.render(messages=messages, add_generation_prompt=True, **self._specials)
            except Exception:  # noqa: BLE001 - a template that refuses these messages: no prefix to match, the request still goes
                return None
            return self._encode(text, add_special_tokens=False)
        prompt = body.prompt()
        if isinstance(prompt, str):
            return self._encode(prompt, add_special_tokens=True)
        return prompt

    def _encode(self, text: str, add_special_tokens: bool) -> list[int]:
        # encode_batch, not encode: it lets go of the GIL while the Rust side works, so a long
        # prompt tokenized on a worker thread does not stop the gateway's event loop.
        return list(self._tok.encode_batch([text], add_special_tokens=add_special_tokens)[0].ids)


def _template_and_specials(path: Path) -> tuple[str | None, dict[str, str]]:
    """The chat template a tokenizer_config.json holds (None: none), and its BOS and EOS texts."""
    if not path.is_file():
        return None, {}
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise TokenizerError(f"{path}: {exc}") from None
    if not isinstance(config, dict):
        return None, {}
    template = config.get("chat_template")
    specials = {name: _token_text(config.get(name)) for name in ("bos_token", "eos_token")}
    return template if isinstance(template, str) else None, specials


def _token_text(value: object) -> str:
    if isinstance(value, dict):  # {"content": "<s>", ...} in older tokenizer configs
        value = value.get("content")
    return value if isinstance(value, str) else ""


def _compile(template: str) -> Any:
    try:
        from jinja2 import TemplateError  # noqa: PLC0415 - import cost: jinja2 only for a pool that renders chat templates
        from jinja2.sandbox import ImmutableSandboxedEnvironment  # noqa: PLC0415 - as above
    except ImportError:
        raise TokenizerError("a chat template needs jinja2: pip install jinja2") from None

    def raise_exception(message: str) -> None:
        raise TemplateError(message)

    def tojson(value: Any, indent: int | None = None) -> str:
        return json.dumps(value, ensure_ascii=False, indent=indent)

    # The environment Hugging Face's apply_chat_template uses (the whitespace rules change the text).
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    try:
        return env.from_string(template)
    except TemplateError as exc:
        raise TokenizerError(f"the chat template does not compile: {exc}") from None
