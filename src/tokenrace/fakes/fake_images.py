"""The images a request carries, decoded as a vision server would before prefill.

Three wire shapes are found anywhere in `messages` (chat, Anthropic) or `input` (Responses):
OpenAI `{"type": "image_url", "image_url": {"url": "data:..."}}`, Responses
`{"type": "input_image", "image_url": "data:..."}`, and Anthropic
`{"type": "image", "source": {"type": "base64", "media_type", "data"}}`. Each is decoded with Pillow
(every pixel, not only the header); one that is not an image, or a URL the fake cannot fetch, is a
400 as a real server gives. The send log keeps each image's format, size, bytes and a digest, so a
test can check that N distinct images of the asked size and format arrived.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import io
from dataclasses import asdict, dataclass
from typing import Any


class ImageError(ValueError):
    """An image part the fake cannot decode (the message goes into a 400)."""


@dataclass(frozen=True, slots=True)
class ReceivedImage:
    format: str  # Pillow's name: PNG, JPEG, ...
    width: int
    height: int
    bytes: int
    sha256: str  # of the encoded bytes

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def _encoded(part: dict[str, Any]) -> str | None:
    """The base64 text of one image part, or None when the part is not an image; ImageError for an
    image the fake cannot read (a URL it would have to fetch)."""
    kind = part.get("type")
    if kind == "image_url":
        value = part.get("image_url")
        url = value.get("url") if isinstance(value, dict) else value
    elif kind == "input_image":
        url = part.get("image_url")
    elif kind == "image":
        source = part.get("source") or {}
        if source.get("type") != "base64":
            raise ImageError(f"Image source type {source.get('type')!r} is not supported by this server.")
        return str(source.get("data") or "")
    else:
        return None
    if not isinstance(url, str) or not url.startswith("data:") or ";base64," not in url:
        raise ImageError("Only base64 data URLs are supported for images by this server.")
    return url.partition(";base64,")[2]


def _parts(body: dict[str, Any]) -> list[dict[str, Any]]:
    """Every content part of the request's messages (chat, Anthropic) or input items (Responses)."""
    items: list[Any] = []
    for key in ("messages", "input"):
        value = body.get(key)
        if isinstance(value, list):
            items += value
    parts: list[dict[str, Any]] = []
    for item in items:
        content = item.get("content") if isinstance(item, dict) else None
        if isinstance(content, list):
            parts += [p for p in content if isinstance(p, dict)]
    return parts


def received_images(body: dict[str, Any]) -> list[ReceivedImage]:
    """Decode every image the request carries; ImageError for one that is not an image."""
    encoded = [data for data in map(_encoded, _parts(body)) if data is not None]
    if not encoded:
        return []  # a text request: Pillow is not even imported (its import takes tens of ms)
    from PIL import Image, UnidentifiedImageError  # noqa: PLC0415 - import cost: Pillow only when a request carries an image

    out = []
    for data in encoded:
        try:
            raw = base64.b64decode(data, validate=True)
        except (binascii.Error, ValueError):
            raise ImageError("An image is not valid base64.") from None
        try:
            with Image.open(io.BytesIO(raw)) as picture:
                picture.load()
                fmt, (w, h) = picture.format or "", picture.size
        except (UnidentifiedImageError, OSError, SyntaxError, ValueError) as exc:
            raise ImageError(f"Cannot identify image file: {exc}") from None
        out.append(ReceivedImage(fmt, w, h, len(raw), hashlib.sha256(raw).hexdigest()))
    return out
