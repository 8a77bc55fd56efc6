"""What the page may be shown of the confined kernel's messages.

Live outputs are trusted by JupyterLab: JavaScript runs, and HTML, Markdown
and SVG keep their scripts and event handlers. A page holds the Jupyter
server's token, so script from confined code could reach the server (and an
unconfined kernel) through it. Forwarded outputs therefore lose their
JavaScript, and any HTML-like part that could run script; the other parts
of the bundle (``text/plain`` at least) stay. The ``rlm`` comm's messages
are the engine's alone: the confined kernel may not speak that protocol.
"""

from __future__ import annotations

import re
from typing import Any

ACTIVE = re.compile(r"<\s*(script|iframe|object|embed|link|meta|base|form)\b|javascript:|\son[a-z]+\s*=|srcdoc\s*=",
                    re.IGNORECASE)
MARKUP = ("text/html", "text/markdown", "image/svg+xml")
BUNDLES = ("display_data", "update_display_data", "execute_result")
DROPPED_NOTE = "text/plain"


def _runs_script(mime: str, value: Any) -> bool:
    if "javascript" in mime or mime.endswith("+js"):
        return True
    if mime in MARKUP or "html" in mime:
        text = "".join(value) if isinstance(value, list) else str(value)
        return bool(ACTIVE.search(text))
    return False


def safe_message(kind: str, content: dict[str, Any]) -> dict[str, Any] | None:
    """``content`` fit to show in the page (a copy when something was taken
    out), or None when the message must not reach it."""
    if kind.startswith("comm_"):
        data = content.get("data") or {}
        if content.get("target_name") == "rlm" or str(data.get("protocol", "")).startswith("rlm/"):
            return None
        return content
    if kind not in BUNDLES:
        return content
    data = content.get("data") or {}
    kept = {mime: value for mime, value in data.items() if not _runs_script(mime, value)}
    if len(kept) == len(data):
        return content
    if not kept:
        kept = {"text/plain": "[an output that could run script in the page was left out (sandboxed run)]"}
    return {**content, "data": kept}


FORWARDED = ("stream", "display_data", "update_display_data", "execute_result", "error", "clear_output",
             "comm_open", "comm_msg", "comm_close")  # the confined kernel's iopub messages the page gets


def republish(kernel: Any, msg: dict[str, Any], parent: dict[str, Any], execution_count: int | None = None) -> None:
    """A confined kernel's iopub ``msg`` sent again on ``kernel``'s iopub under
    ``parent``, made safe for the page (nothing that must not reach it); an
    ``execute_result`` takes ``execution_count`` when given."""
    kind = msg["msg_type"]
    if kind not in FORWARDED:
        return
    content = safe_message(kind, msg["content"])
    if content is None:
        return
    if kind == "execute_result" and execution_count is not None:
        content = {**content, "execution_count": execution_count}
    kernel.session.send(kernel.iopub_socket, kind, content, parent=parent, ident=kernel._topic(kind),
                        metadata=msg.get("metadata") or {})


def ask_person(kernel: Any, prompt: str, password: bool) -> str:
    """``input()`` in confined code, asked of the person through ``kernel``'s stdin."""
    try:
        return kernel.getpass(prompt) if password else kernel.raw_input(prompt)
    except Exception:  # noqa: BLE001 - no stdin on this request: the code's input() gets nothing
        return ""


__all__ = ["FORWARDED", "ask_person", "republish", "safe_message"]
