"""Images a request carries: their wire shapes, and what the record says about them.

The workload (load/workloads/images.py) makes or reads the images before the run and puts them in
the prompt's chat messages as OpenAI `image_url` parts holding data URLs; the prompt's `ImageTally`
says how many there are, their encoded bytes and their pixels. Each API's request builder reshapes
those parts: Responses `input_image`, Anthropic `image` with a base64 source.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal, TypeAlias, TypedDict

from tokenrace.client.conversation import ChatMessage, ContentPart, ImageUrlPart, TextPart

# The APIs whose requests can carry images.
IMAGE_APIS = ("chat", "responses", "messages")


class ResponsesText(TypedDict):
    type: Literal["input_text"]
    text: str


class ResponsesImage(TypedDict):
    type: Literal["input_image"]
    image_url: str


class Base64Source(TypedDict):
    type: Literal["base64"]
    media_type: str
    data: str


class UrlSource(TypedDict):
    type: Literal["url"]
    url: str


class AnthropicImage(TypedDict):
    type: Literal["image"]
    source: Base64Source | UrlSource


ResponsesPart: TypeAlias = ResponsesText | ResponsesImage
AnthropicPart: TypeAlias = TextPart | AnthropicImage  # a text part has the same shape in both APIs


@dataclass(frozen=True, slots=True)
class Image:
    """One encoded image: its MIME type, base64 text, encoded size and dimensions."""

    mime: str  # image/png, image/jpeg, ...
    b64: str
    nbytes: int
    width: int
    height: int

    @property
    def pixels(self) -> int:
        return self.width * self.height

    def data_url(self) -> str:
        return f"data:{self.mime};base64,{self.b64}"

    def chat_part(self) -> ImageUrlPart:
        return {"type": "image_url", "image_url": {"url": self.data_url()}}


@dataclass(frozen=True, slots=True)
class ImageTally:
    """The images of one request: how many, encoded bytes and pixels (None when one is unknown,
    e.g. an image given by an http URL that the client never reads)."""

    count: int = 0
    nbytes: int | None = 0
    pixels: int | None = 0

    def plus(self, other: ImageTally) -> ImageTally:
        return ImageTally(self.count + other.count, _add(self.nbytes, other.nbytes), _add(self.pixels, other.pixels))

    @staticmethod
    def of(images: Iterable[Image]) -> ImageTally:
        images = tuple(images)
        return ImageTally(len(images), sum(i.nbytes for i in images), sum(i.pixels for i in images))


def _add(a: int | None, b: int | None) -> int | None:
    return None if a is None or b is None else a + b


def with_images(messages: list[ChatMessage], images: Iterable[Image]) -> list[ChatMessage]:
    """The messages with `images` appended as parts of the last user message (a new one if none)."""
    parts: list[ContentPart] = [i.chat_part() for i in images]
    if not parts:
        return messages
    out = [m.copy() for m in messages]
    last = next((m for m in reversed(out) if m.get("role") == "user"), None)
    if last is None:
        out.append({"role": "user", "content": parts})
        return out
    content = last.get("content")
    if isinstance(content, list):
        last["content"] = [*content, *parts]
    else:
        last["content"] = [{"type": "text", "text": str(content or "")}, *parts]
    return out


def image_parts(messages: Iterable[ChatMessage]) -> list[ImageUrlPart]:
    """Every OpenAI `image_url` part of the messages, in order."""
    return [
        part for m in messages if isinstance(m["content"], list) for part in m["content"] if part["type"] == "image_url"
    ]


def part_url(part: ImageUrlPart) -> str:
    """The URL of an OpenAI `image_url` part (`{"url": ...}`, or a bare string as some clients send)."""
    value = part["image_url"]
    return value if isinstance(value, str) else value["url"]


def split_data_url(url: str) -> tuple[str, str] | None:
    """`data:MIME;base64,DATA` -> (MIME, DATA); None for any other URL."""
    if not url.startswith("data:"):
        return None
    head, sep, data = url[5:].partition(",")
    if not sep or not head.endswith(";base64"):
        return None
    return head.removesuffix(";base64"), data


def responses_part(part: ContentPart) -> ResponsesPart:
    """An OpenAI chat content part in the Responses API's shape (`input_text`, `input_image`)."""
    if part["type"] == "image_url":
        return {"type": "input_image", "image_url": part_url(part)}
    return {"type": "input_text", "text": part["text"]}


def anthropic_part(part: ContentPart) -> AnthropicPart:
    """An OpenAI chat content part in Anthropic's Messages shape: a base64 `image` source for a data
    URL, a `url` source for any other URL."""
    if part["type"] != "image_url":
        return part
    url = part_url(part)
    data = split_data_url(url)
    if data is None:
        return {"type": "image", "source": {"type": "url", "url": url}}
    mime, b64 = data
    return {"type": "image", "source": {"type": "base64", "media_type": mime, "data": b64}}
