"""Images: what a sub-call sends and what the root model sees of a cell's plots.

An image reaches a model as an ``image_url`` part holding a data URL,
downscaled first to at most ``MAX_SIDE`` pixels on its long side (Pillow
does the downscaling; without it an image is refused in one sentence). Its
``hash`` (of the bytes sent) is its identity: a sub-call's prompt hash
folds it in, and a notebook keeps each image once per cell under it.

Sub-calls take what code has at hand (:func:`load`): a matplotlib figure,
a PIL image, PNG/JPEG/GIF/WebP bytes, a file path or a data URL. A cell's
outputs give theirs through :func:`from_output` (``image/*`` data of a
``display_data`` or ``execute_result``).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import io
import os
from dataclasses import dataclass
from typing import Any

from ...errors import RLMError

MAX_SIDE = 1024  # pixels on the long side, at most
MIMES = ("image/png", "image/jpeg", "image/gif", "image/webp")
THUMB_SIDE = 96  # a sub-call row's thumbnail
NO_PILLOW = ("Images need Pillow to be downscaled, and it is not installed: "
             "pip install 'rlm-kernel[vision]' (or pillow).")
_FORMATS = {"image/png": "PNG", "image/jpeg": "JPEG", "image/gif": "PNG", "image/webp": "WEBP"}


class ImageError(RLMError, ValueError):
    """A value that cannot be sent as an image (said in one sentence)."""


@dataclass(frozen=True)
class Image:
    mime: str
    data: bytes  # as sent: at most MAX_SIDE px on the long side
    width: int
    height: int

    @property
    def hash(self) -> str:
        return hashlib.sha256(self.data).hexdigest()[:12]

    def data_url(self) -> str:
        return f"data:{self.mime};base64,{base64.b64encode(self.data).decode('ascii')}"

    def part(self) -> dict[str, Any]:
        """The message content part a model reads."""
        return {"type": "image_url", "image_url": {"url": self.data_url()}}

    def thumbnail_url(self, side: int = THUMB_SIDE) -> str:
        """A small PNG of the image as a data URL (for a sub-call's row)."""
        pil = _pillow()
        with pil.open(io.BytesIO(self.data)) as img:
            img = img.convert("RGBA") if img.mode not in ("RGB", "RGBA") else img.copy()
            img.thumbnail((side, side))
            out = io.BytesIO()
            img.save(out, "PNG")
        return f"data:image/png;base64,{base64.b64encode(out.getvalue()).decode('ascii')}"


def _pillow() -> Any:
    try:
        from PIL import Image as pil
    except ImportError:
        raise ImageError(NO_PILLOW) from None
    return pil


def sniff(raw: bytes) -> str | None:
    """The image type of some bytes by their first bytes (None: not an image we send)."""
    if raw.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if raw.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if raw.startswith((b"GIF87a", b"GIF89a")):
        return "image/gif"
    if raw[:4] == b"RIFF" and raw[8:12] == b"WEBP":
        return "image/webp"
    return None


def from_bytes(raw: bytes, mime: str | None = None) -> Image:
    """An image from encoded bytes, downscaled when larger than ``MAX_SIDE``."""
    mime = sniff(raw) or mime
    if mime not in MIMES:
        raise ImageError("These bytes are not a PNG, JPEG, GIF or WebP image.")
    pil = _pillow()
    try:
        with pil.open(io.BytesIO(raw)) as img:
            width, height = img.size
            if max(width, height) <= MAX_SIDE:
                return Image(mime, raw, width, height)
            img.load()
            if mime == "image/jpeg" and img.mode not in ("RGB", "L"):
                img = img.convert("RGB")
            elif mime == "image/gif":
                img = img.convert("RGBA")
            img.thumbnail((MAX_SIDE, MAX_SIDE), pil.LANCZOS)
            out = io.BytesIO()
            img.save(out, _FORMATS[mime])
            kept = "image/png" if mime == "image/gif" else mime
            return Image(kept, out.getvalue(), *img.size)
    except ImageError:
        raise
    except Exception as error:
        raise ImageError(f"The image could not be read ({type(error).__name__}: {error}).") from None


def from_data_url(url: str) -> Image:
    head, _, payload = url.partition(",")
    if not head.startswith("data:image/") or ";base64" not in head:
        raise ImageError(f"{url[:40]!r}... is not a base64 data URL of an image.")
    try:
        raw = base64.b64decode(payload, validate=False)
    except (binascii.Error, ValueError):
        raise ImageError("The data URL's base64 payload could not be decoded.") from None
    return from_bytes(raw, head[5:].split(";", 1)[0])


def load(value: Any) -> Image:
    """An image from what code has at hand: a matplotlib figure, a PIL image,
    bytes, a file path or a data URL; anything else is refused in one sentence."""
    if isinstance(value, Image):
        return value
    if isinstance(value, (bytes, bytearray, memoryview)):
        return from_bytes(bytes(value))
    if isinstance(value, str) and value.startswith("data:"):
        return from_data_url(value)
    if isinstance(value, (str, os.PathLike)):
        path = os.fspath(value)
        try:
            with open(path, "rb") as handle:
                raw = handle.read()
        except OSError as error:
            raise ImageError(f"Cannot read the image file {path!r} ({(error.strerror or str(error)).lower()}).") \
                from None
        return from_bytes(raw)
    if hasattr(value, "savefig"):  # a matplotlib figure
        out = io.BytesIO()
        value.savefig(out, format="png", bbox_inches="tight")
        return from_bytes(out.getvalue())
    if hasattr(value, "save") and hasattr(value, "size") and hasattr(value, "mode"):  # a PIL image
        out = io.BytesIO()
        value.save(out, "PNG")
        return from_bytes(out.getvalue())
    raise ImageError(f"An image must be a matplotlib figure, a PIL image, PNG/JPEG bytes, a file path or a "
                     f"data URL, not {type(value).__name__}.")


def load_all(values: Any) -> list[Image]:
    """``images=[...]`` of a sub-call (None: none)."""
    if values is None:
        return []
    if isinstance(values, (str, bytes, os.PathLike)) or not hasattr(values, "__iter__"):
        values = [values]  # one image given bare
    return [load(v) for v in values]


def output_image(output: dict[str, Any]) -> tuple[str, str] | None:
    """(mime, base64) of the image a ``display_data`` / ``execute_result`` shows, if any."""
    if output.get("output_type") not in ("display_data", "execute_result"):
        return None
    data = output.get("data") or {}
    for mime in MIMES:
        value = data.get(mime)
        if isinstance(value, (bytes, bytearray)):
            return mime, base64.b64encode(value).decode("ascii")
        if value:
            return mime, "".join(value) if isinstance(value, list) else str(value)
    return None


def from_output(output: dict[str, Any]) -> Image | None:
    """The image an output shows, downscaled (None: it shows none)."""
    found = output_image(output)
    if found is None:
        return None
    mime, payload = found
    try:
        raw = base64.b64decode(payload.replace("\n", ""))
    except (binascii.Error, ValueError):
        return None
    return from_bytes(raw, mime)


def images_metadata(records: list[Any]) -> dict[str, str]:
    """The images of a cell's sub-calls for its ``metadata.rlm.images``: each once, by hash."""
    return {image.hash: image.data_url() for record in records for image in record.images}


def write_records(meta: dict[str, Any], records: list[Any]) -> None:
    """A cell's sub-call records into its ``metadata.rlm``, with their images once each."""
    meta["subcalls"] = [r.as_metadata() for r in records]
    images = images_metadata(records)
    if images:
        meta["images"] = images


def hashes_key(images: list[Image]) -> str:
    """What a sub-call's images add to its prompt hash (empty: no images)."""
    return "".join(f"\x00image:{image.hash}" for image in images)


__all__ = ["MAX_SIDE", "MIMES", "NO_PILLOW", "Image", "ImageError", "from_bytes", "from_data_url", "from_output",
           "hashes_key", "images_metadata", "load", "load_all", "output_image", "write_records"]
