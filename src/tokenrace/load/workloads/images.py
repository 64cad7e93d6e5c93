"""Images for the requests: generated from the seed, read from a folder, or named by a dataset.

Generated images are real encoded files (PNG or JPEG, made with Pillow) of exactly the asked size,
their pixels uniform noise drawn from (seed, request, image, the run's nonce), so every request's
images differ from every other's, in this run and in any other (a server's cache outlives a run, as
for cache busting), and no server can answer one from a cache. They are made before the load starts,
outside any timed section: one set per request of a known count (cold, warm-up and measured
requests), else a pool that repeats (noted in the manifest).

Files (`--image-dir`, a dataset's `image` field, data URLs in a dataset's messages) are opened with
Pillow when the inputs are read, so a file that is not an image is refused before the first request.
"""

from __future__ import annotations

import base64
import io
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

import numpy as np

from tokenrace.client.conversation import ChatMessage
from tokenrace.client.images import Image, ImageTally, image_parts, part_url, split_data_url, with_images
from tokenrace.client.openai import Prompt
from tokenrace.errors import InvalidInput

ImageFormat = Literal["png", "jpeg"]
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".webp", ".gif", ".bmp")
MIME = {"PNG": "image/png", "JPEG": "image/jpeg", "WEBP": "image/webp", "GIF": "image/gif", "BMP": "image/bmp"}
# Without a request count (a run bounded by time) generated images come from a pool this large.
POOL_SIZE = 256
JPEG_QUALITY = 90
DEFAULT_SIZES = ((512, 512),)


@dataclass(frozen=True, slots=True)
class ImageSpec:
    """`count` images on a `share` of the requests: generated at `sizes` (cycled) in `format`, or the
    files of `directory` (cycled)."""

    count: int = 1
    sizes: tuple[tuple[int, int], ...] = DEFAULT_SIZES
    format: ImageFormat = "png"
    share: float = 1.0
    directory: str | None = None

    def validate(self) -> None:
        if self.count < 1:
            raise InvalidInput("images", f"must be at least 1 image per request, got {self.count}")
        if not 0.0 < self.share <= 1.0:
            raise InvalidInput("image_share", f"must be a share above 0 and at most 1, got {self.share}")
        for w, h in self.sizes:
            if w < 1 or h < 1 or w * h > 64_000_000:
                raise InvalidInput("image_size", f"{w}x{h} is not a usable size (1x1 up to 64 megapixels)")


def generate(size: tuple[int, int], fmt: ImageFormat, seed: int, index: int, k: int, salt: int = 0) -> Image:
    """Image `k` of request `index`: noise of exactly `size`, encoded as `fmt`; the same for the same
    (seed, index, k, salt), different for any other. `salt`: the run's own (from its nonce), so a later
    run against the same server sends images its cache has never seen."""
    from PIL import Image as PILImage  # noqa: PLC0415 - import cost: Pillow only when a run carries images

    w, h = size
    rng = np.random.default_rng([seed & 0xFFFFFFFF, 0x1A6E, index, k, salt & 0xFFFFFFFF])
    pixels = rng.integers(0, 256, size=(h, w, 3), dtype=np.uint8)
    buf = io.BytesIO()
    picture = PILImage.fromarray(pixels, "RGB")
    if fmt == "jpeg":
        picture.save(buf, "JPEG", quality=JPEG_QUALITY)
    else:
        picture.save(buf, "PNG", compress_level=0)  # noise does not compress: store it (fast)
    raw = buf.getvalue()
    return Image(f"image/{fmt}", base64.b64encode(raw).decode("ascii"), len(raw), w, h)


def decode(raw: bytes, what: str, param: str) -> Image:
    """Bytes that must be an image (fully decoded by Pillow), as an `Image`; else InvalidInput."""
    from PIL import Image as PILImage  # noqa: PLC0415 - import cost: Pillow only when a run carries images
    from PIL import UnidentifiedImageError  # noqa: PLC0415 - import cost: Pillow only when a run carries images

    try:
        with PILImage.open(io.BytesIO(raw)) as picture:
            picture.load()
            fmt, (w, h) = picture.format or "", picture.size
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError) as exc:
        raise InvalidInput(param, f"{what} is not an image Pillow can read ({exc})") from None
    mime = MIME.get(fmt, f"image/{fmt.lower()}")
    return Image(mime, base64.b64encode(raw).decode("ascii"), len(raw), w, h)


def read_file(path: Path, param: str) -> Image:
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise InvalidInput(param, f"cannot read the image {path}: {exc.strerror}") from None
    return decode(raw, str(path), param)


def read_dir(directory: str) -> tuple[Image, ...]:
    """Every image file of `directory` (by suffix, sorted by name), each checked to be an image."""
    d = Path(directory)
    if not d.is_dir():
        raise InvalidInput("image_dir", f"{d} is not a directory")
    files = sorted(p for p in d.iterdir() if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES)
    if not files:
        raise InvalidInput("image_dir", f"{d} holds no image files ({', '.join(IMAGE_SUFFIXES)})")
    return tuple(read_file(p, "image_dir") for p in files)


def tally_messages(messages: Sequence[ChatMessage], param: str, where: str) -> ImageTally | None:
    """The images a dataset's messages carry as OpenAI image parts (None: none). Data URLs are decoded
    (so a part that is not an image is refused now); other URLs count, with bytes and pixels unknown."""
    parts = image_parts(messages)
    if not parts:
        return None
    tally = ImageTally()
    for part in parts:
        url = part_url(part)
        if not url:
            raise InvalidInput(param, f"{where}: an image_url part has no URL")
        data = split_data_url(url)
        if data is None:
            tally = tally.plus(ImageTally(1, None, None))
            continue
        try:
            raw = base64.b64decode(data[1], validate=True)
        except ValueError:
            raise InvalidInput(param, f"{where}: an image part's data URL is not base64") from None
        image = decode(raw, f"{where}: an image part", param)
        tally = tally.plus(ImageTally(1, image.nbytes, image.pixels))
    return tally


def attach(prompt: Prompt, images: Sequence[Image]) -> Prompt:
    """The prompt with `images` added to its last user message, and its tally updated."""
    if not images:
        return prompt
    messages = with_images(prompt.as_messages(), images)
    tally = (prompt.images or ImageTally()).plus(ImageTally.of(images))
    return replace(prompt, messages=messages, text=None, images=tally)


@dataclass(frozen=True, slots=True)
class ImageBank:
    """The images of each request, by its number: `for_request(i)` (empty for a request without)."""

    sets: tuple[tuple[Image, ...], ...]
    repeats: bool  # True: a pool, reused when requests outnumber it

    def for_request(self, index: int) -> tuple[Image, ...]:
        return self.sets[index % len(self.sets)]

    def note(self) -> str | None:
        if not self.repeats:
            return None
        return f"images: a pool of {len(self.sets)} request image sets, repeated beyond that many requests"


def build_bank(
    spec: ImageSpec, requests: int | None, seed: int, files: tuple[Image, ...] = (), salt: int = 0
) -> ImageBank:
    """One image set per request (`requests`: how many the run sends, None when unknown); `salt`
    makes this run's generated images differ from every other run's."""
    n = requests if requests is not None else POOL_SIZE
    carries = np.random.default_rng([seed & 0xFFFFFFFF, 0x5A4E]).random(n) < spec.share
    sets: list[tuple[Image, ...]] = []
    drawn = 0  # images made so far: sizes and files cycle over them
    for index in range(n):
        if not carries[index]:
            sets.append(())
            continue
        if files:
            one = tuple(files[(drawn + k) % len(files)] for k in range(spec.count))
        else:
            pick = [spec.sizes[(drawn + k) % len(spec.sizes)] for k in range(spec.count)]
            one = tuple(generate(size, spec.format, seed, index, k, salt) for k, size in enumerate(pick))
        drawn += spec.count
        sets.append(one)
    return ImageBank(tuple(sets), repeats=requests is None)
