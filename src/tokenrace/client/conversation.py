"""Chat messages as OpenAI's Chat Completions API takes them, and their content parts.

The shape is fixed by the API, so the types are TypedDicts: a prompt's messages are sent as they
are, with no copy or conversion on the way to the request body. A message read from a file
(a prompts JSONL, a sessions file) is checked here when it is read (`chat_messages`,
`chat_content`), so a wrong one is refused before the first request; a checked message keeps any
other key it had (`name`, an image's `detail`), as the file gave it.
"""

from __future__ import annotations

from typing import Any, Literal, NotRequired, TypeAlias, TypedDict, TypeGuard


class ImageUrl(TypedDict):
    url: str  # a data URL (data:image/png;base64,...) or an http(s) URL
    detail: NotRequired[str]  # low | high | auto


class TextPart(TypedDict):
    type: Literal["text"]
    text: str


class ImageUrlPart(TypedDict):
    type: Literal["image_url"]
    image_url: ImageUrl | str  # `{"url": ...}`, or a bare URL as some datasets write it


ContentPart: TypeAlias = TextPart | ImageUrlPart
Content: TypeAlias = str | list[ContentPart]


class ChatMessage(TypedDict):
    role: str  # system | developer | user | assistant
    content: Content


# Why a file's message content is refused.
CONTENT_PROBLEM = "content must be text (a string or a list of text parts), or a user's text and image_url parts"
NO_URL = "an image_url part has no URL"


def is_text_part(value: Any) -> TypeGuard[TextPart]:
    return isinstance(value, dict) and value.get("type") == "text" and isinstance(value.get("text"), str)


def is_image_part(value: Any) -> TypeGuard[ImageUrlPart]:
    """An `image_url` part with a non-empty URL."""
    if not isinstance(value, dict) or value.get("type") != "image_url":
        return False
    image = value.get("image_url")
    url = image.get("url") if isinstance(image, dict) else image
    return isinstance(url, str) and bool(url)


def chat_content(value: Any, images: bool = True) -> Content:
    """A message's `content` read from a file: a string, or a list of text parts (and image_url
    parts when `images`). ValueError says what is wrong."""
    if isinstance(value, str):
        return value
    if not isinstance(value, list):
        raise ValueError(CONTENT_PROBLEM)
    parts: list[ContentPart] = []
    for part in value:
        if is_text_part(part) or (images and is_image_part(part)):
            parts.append(part)
        elif images and isinstance(part, dict) and part.get("type") == "image_url":
            raise ValueError(NO_URL)
        else:
            raise ValueError(CONTENT_PROBLEM)
    return parts


def chat_messages(value: Any) -> list[ChatMessage]:
    """A file's `messages` list, each message an object with a string `role` and a `content`
    (`chat_content`). ValueError says which message is wrong and why."""
    if not isinstance(value, list):
        raise ValueError("messages must be a list")
    messages: list[ChatMessage] = []
    for j, message in enumerate(value):
        problem = _message_problem(message)
        if problem is not None:
            raise ValueError(f"message {j}: {problem}")
        messages.append(message)  # checked: kept as given, other keys included
    return messages


def _message_problem(message: Any) -> str | None:
    if not isinstance(message, dict) or not isinstance(message.get("role"), str):
        return 'expected an object with a "role"'
    try:
        chat_content(message.get("content"))
    except ValueError as exc:
        return str(exc)
    return None


def content_text(content: Content) -> str:
    """The text of a message's content: the string, or its text parts joined."""
    if isinstance(content, str):
        return content
    return "".join(p["text"] for p in content if p["type"] == "text")
