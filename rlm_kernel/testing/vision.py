"""The image parts a scripted server receives, read and checked.

The server (``server.py``) refuses, with a 400 as a provider would, a
request whose image parts are not base64 data URLs of PNG/JPEG/GIF/WebP
images at most ``max_side`` pixels on their long side, that carries more
than ``max_images`` of them, or that sends any to a model it was told
takes none (``blind_models``); it keeps what it received for the test.
"""

from __future__ import annotations

import base64
import io
from dataclasses import dataclass
from typing import Any

ALLOWED = ("image/png", "image/jpeg", "image/gif", "image/webp")


@dataclass(frozen=True)
class ReceivedImage:
    model: str
    mime: str
    width: int
    height: int
    size: int  # bytes
    message: int  # index of the message that carried it


def image_parts(body: dict[str, Any]) -> list[tuple[int, dict[str, Any]]]:
    """(message index, part) of every image part in a request."""
    found = []
    for index, message in enumerate(body.get("messages") or []):
        content = message.get("content")
        if isinstance(content, list):
            found += [(index, p) for p in content if isinstance(p, dict) and p.get("type") == "image_url"]
    return found


def read(body: dict[str, Any], max_side: int, max_images: int | None,
         blind_models: tuple[str, ...]) -> tuple[list[ReceivedImage], str | None]:
    """The request's images, and what is wrong with them (None: nothing)."""
    model = str(body.get("model", ""))
    parts = image_parts(body)
    if not parts:
        return [], None
    from PIL import Image

    if parts and model.startswith(blind_models):
        return [], f"{model} does not take images ({len(parts)} image parts were sent)"
    if max_images is not None and len(parts) > max_images:
        return [], f"{len(parts)} image parts in one request; at most {max_images} are allowed"
    received = []
    for index, part in parts:
        url = (part.get("image_url") or {}).get("url", "")
        head, _, payload = url.partition(",")
        mime = head[5:].split(";", 1)[0] if head.startswith("data:") else ""
        if mime not in ALLOWED or ";base64" not in head:
            return [], f"an image part is not a base64 data URL of a PNG, JPEG, GIF or WebP image ({url[:30]!r})"
        raw = base64.b64decode(payload)
        with Image.open(io.BytesIO(raw)) as img:
            width, height = img.size
            actual = Image.MIME.get(img.format or "", "")
        if actual != mime:
            return [], f"an image part says {mime} but holds {actual or 'something else'}"
        if max(width, height) > max_side:
            return [], f"an image part is {width}x{height} px, over the {max_side} px limit"
        received.append(ReceivedImage(model, mime, width, height, len(raw), index))
    return received, None


__all__ = ["ReceivedImage", "image_parts", "read"]
