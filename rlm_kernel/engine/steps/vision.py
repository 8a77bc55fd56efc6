"""What the root model sees of the images its cells display.

After a step, the images its code cells displayed (matplotlib figures,
``IPython.display.Image``, any PNG/JPEG/GIF/WebP ``display_data`` or
``execute_result``) go into the next user message as image parts, after
the text feedback, when the root model takes images: ``--vision on``, or
``auto`` (the default) when litellm's model info says the model supports
vision. At most ``--max-images-per-step`` per step, each downscaled to at
most 1,024 px on its long side; the text says which cell each came from
and how many were left out. A root model that does not take images gets
one line per cell saying so instead.
"""

from __future__ import annotations

from typing import Any

from ..._words import plural
from ..model.litellm_setup import load_litellm
from ..protocol.images import Image, ImageError, from_output, output_image

_SUPPORTS: dict[str, bool] = {}


def supports_vision(model: str) -> bool:
    """Whether litellm's model info says ``model`` takes images (False when it does not know it)."""
    if model not in _SUPPORTS:
        try:
            _SUPPORTS[model] = bool(load_litellm().supports_vision(model=model))
        except Exception:
            _SUPPORTS[model] = False
    return _SUPPORTS[model]


def takes_images(setting: str, model: str) -> tuple[bool, str]:
    """(whether the root model is shown images, why not when it is not)."""
    if setting == "on":
        return True, ""
    if setting == "off":
        return False, "--vision is off"
    if supports_vision(model):
        return True, ""
    return False, f"litellm's model info does not say {model} supports vision (--vision on sends them anyway)"


class StepImages:
    """The images of one step's cells, as the next user message carries them
    (``options``: the run's; ``model``: its root model)."""

    def __init__(self, options: Any, model: str) -> None:
        self.limit = int(options.max_images_per_step)
        self.on, self.why_not = takes_images(options.vision, model)
        self.images: list[tuple[str, Image]] = []  # (the cell's label, the image)
        self.left_out = 0

    def add(self, label: str, outputs: list[dict[str, Any]]) -> str | None:
        """Take the images among a cell's outputs; the line the feedback says about them."""
        found = [o for o in outputs if output_image(o) is not None]
        if not found:
            return None
        if not self.on:
            return f"{label} displayed {plural(len(found), 'image')}, not shown to you: {self.why_not}."
        shown: list[int] = []
        problems: list[str] = []
        for output in found:
            if len(self.images) >= self.limit:
                self.left_out += 1
                continue
            try:
                image = from_output(output)
            except ImageError as error:
                problems.append(str(error))
                continue
            if image is not None:
                self.images.append((label, image))
                shown.append(len(self.images))
        parts = []
        if shown:
            names = ", ".join(f"image {n}" for n in shown)
            parts.append(f"{label} displayed {plural(len(found), 'image')}: {names} below")
        else:
            parts.append(f"{label} displayed {plural(len(found), 'image')}")
        skipped = len(found) - len(shown) - len(problems)
        if skipped:
            parts.append(f"{skipped} left out (at most {self.limit} per step, --max-images-per-step)")
        if problems:
            parts.append(f"{len(problems)} not shown: {problems[0]}")
        return "; ".join(parts) + "."

    def content(self, text: str) -> str | list[dict[str, Any]]:
        """The user message's content: the text alone, or the text and the images."""
        if not self.images:
            return text
        if self.left_out:
            text += (f"\n\n({plural(self.left_out, 'more image')} displayed in this step "
                     f"{'was' if self.left_out == 1 else 'were'} left out.)")
        parts: list[dict[str, Any]] = [{"type": "text", "text": text}]
        for number, (label, image) in enumerate(self.images, 1):
            parts.append({"type": "text", "text": f"Image {number} ({label}, {image.width}x{image.height}):"})
            parts.append(image.part())
        return parts


def briefing(options: Any, model: str) -> str:
    """What the root model is told of images in its first message (nothing
    when it takes none)."""
    if not takes_images(options.vision, model)[0]:
        return ""
    return ("Images: what your code displays (a matplotlib figure with display(fig), IPython.display.Image) is "
            f"shown to you after the step, at most {plural(int(options.max_images_per_step), 'image')} a step. "
            "`llm_query(prompt, images=[...])` sends images to the sub-model too (matplotlib figures, PIL images, "
            "PNG/JPEG bytes, file paths or data URLs); in `llm_query_batched` a prompt may be a `(text, images)` pair.")


MAX_HISTORY_IMAGES = 32  # image parts a root call carries at most (Anthropic takes 100 a request)
KEEP_HISTORY_IMAGES = 16  # the newest kept when the history reaches that (a trim now and then, not every step)
SHED = "[an image from an earlier step, no longer sent to keep the request small; its cell's output keeps it]"


def shed_old_images(messages: list[dict[str, Any]]) -> int:
    """Once the history holds more than ``MAX_HISTORY_IMAGES`` image parts,
    replace all but the newest ``KEEP_HISTORY_IMAGES`` by a line saying so
    (in place); how many were replaced."""
    places = [(m, i) for m in messages if isinstance(m.get("content"), list)
              for i, part in enumerate(m["content"]) if isinstance(part, dict) and part.get("type") == "image_url"]
    if len(places) <= MAX_HISTORY_IMAGES:
        return 0
    old = places[:len(places) - KEEP_HISTORY_IMAGES]
    for message, index in old:
        content = list(message["content"])
        content[index] = {"type": "text", "text": SHED}
        message["content"] = content
    return len(old)


def cell_label(execution_count: int | None) -> str:
    return f"Cell [{execution_count}]" if execution_count is not None else "A cell"


def rebuilt_note(execution_count: int | None, outputs: list[dict[str, Any]]) -> str | None:
    """What a history rebuilt from a notebook says of a cell's images (it does not send them again)."""
    count = sum(output_image(o) is not None for o in outputs)
    if not count:
        return None
    return f"{cell_label(execution_count)} displayed {plural(count, 'image')} (not sent again in a history rebuilt from the notebook)."


__all__ = ["MAX_HISTORY_IMAGES", "StepImages", "briefing", "cell_label", "shed_old_images", "rebuilt_note", "supports_vision", "takes_images"]
