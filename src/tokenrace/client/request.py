"""What one request sends, independent of the API that carries it.

`Prompt` is the workload's side (the conversation, the text, the batch of inputs); `RequestOptions`
the run's (which API, streaming, sampling); `RequestSpec` the two together with the model: what an
API's body builder (`tokenrace.client.apis`) turns into JSON.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, TypeAlias, TypedDict, get_args

from pydantic import JsonValue

from tokenrace.client.conversation import ChatMessage
from tokenrace.client.images import ImageTally
from tokenrace.client.structured import JsonSchema, Tool, ToolChoice

ApiName: TypeAlias = Literal["chat", "completions", "responses", "messages", "embeddings", "rerank"]
API_NAMES: tuple[str, ...] = get_args(ApiName)
# APIs that generate text (streamed token by token) and APIs that answer a batch in one body.
GENERATING_APIS: tuple[str, ...] = ("chat", "completions", "responses", "messages")
POOLING_APIS: tuple[str, ...] = ("embeddings", "rerank")
RerankFormat: TypeAlias = Literal["cohere", "tei"]


class Sampling(TypedDict, total=False):
    """The sampling fields a request body carries when the run sets them."""

    temperature: float
    seed: int


@dataclass(slots=True)
class Prompt:
    """What to send. `messages` for chat, `text` for completions (either is derived if missing).

    Embeddings send `inputs` (one vector each); rerank sends `text` as the query and ranks `documents`.
    """

    messages: list[ChatMessage] | None = None
    text: str | None = None
    max_tokens: int | None = None
    label: str | None = None
    # Headers for this request only, e.g. a multi-turn session's id for routers that pin sessions.
    headers: dict[str, str] | None = None
    inputs: list[str] | None = None  # embeddings: the texts to embed in this request
    documents: list[str] | None = None  # rerank: the documents to rank against the query (`text`)
    # The images `messages` carry (as OpenAI image_url parts); None when it carries none.
    images: ImageTally | None = None
    content: str | None = None  # what the model is asked to write (natural, copy, random), when chosen

    def as_text(self) -> str:
        """All the text the request carries, for counting its tokens."""
        if self.inputs is not None:
            return "\n".join(self.inputs)
        if self.documents is not None:
            return "\n".join([self.text or "", *self.documents])
        if self.text is not None:
            return self.text
        return "\n".join(str(m.get("content", "")) for m in self.messages or [])

    def as_messages(self) -> list[ChatMessage]:
        if self.messages is not None:
            return self.messages
        return [{"role": "user", "content": self.text or ""}]


@dataclass(slots=True)
class RequestOptions:
    api: str = "chat"  # one of API_NAMES
    stream: bool = True
    include_usage: bool = True
    max_tokens: int | None = 256
    temperature: float | None = None
    seed: int | None = None
    extra_body: dict[str, JsonValue] = field(default_factory=dict)  # merged into every request's JSON
    extra_headers: dict[str, str] = field(default_factory=dict)
    rerank_format: str = "cohere"  # rerank: cohere (/v1/rerank: query, documents, top_n) | tei (/rerank: query, texts)
    tools: list[Tool] | None = None  # an OpenAI tools list (client/structured.py)
    tool_choice: ToolChoice | None = None
    response_schema: JsonSchema | None = None  # a JSON Schema every answer must meet
    response_schema_name: str = "answer"

    @property
    def structured(self) -> bool:
        """Tools or a response schema: the answer is read for tool calls and validated."""
        return self.tools is not None or self.response_schema is not None


@dataclass(frozen=True, slots=True)
class RequestSpec:
    """One request, resolved: the model, the prompt and the run's options."""

    model: str
    prompt: Prompt
    options: RequestOptions

    @property
    def max_tokens(self) -> int | None:
        return self.prompt.max_tokens if self.prompt.max_tokens is not None else self.options.max_tokens

    def sampling(self, *, seed: bool = True) -> Sampling:
        """temperature (and seed, where the API takes one) when set."""
        out: Sampling = {}
        if self.options.temperature is not None:
            out["temperature"] = self.options.temperature
        if seed and self.options.seed is not None:
            out["seed"] = self.options.seed
        return out
