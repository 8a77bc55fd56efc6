"""Importing litellm: lazily (it takes seconds and ~170 MB), once, with our settings."""

from __future__ import annotations

import importlib
import os
import threading
from typing import Any

_litellm: Any = None
_lock = threading.Lock()


def litellm_loaded() -> bool:
    return _litellm is not None


def load_in_background(then: tuple[str, ...] = ()) -> threading.Thread:
    """Begin importing litellm on a thread of its own (the kernel once it has
    answered its first kernel_info, ``rlm-kernel run`` while it loads the
    context), then the modules named in ``then``; whoever asks next with
    :func:`load_litellm` waits for litellm."""

    def load() -> None:
        try:
            load_litellm()
        except Exception:  # noqa: BLE001 - the next load_litellm() raises it where it is needed
            return
        for name in then:
            try:
                importlib.import_module(name)
            except Exception:  # noqa: BLE001 - imported again, failing where it is used
                pass

    thread = threading.Thread(target=load, name="rlm-litellm-import", daemon=True)
    thread.start()
    return thread


def load_litellm() -> Any:
    """The litellm module, imported on first use (a background import and a
    first run may both ask; one imports)."""
    global _litellm
    if _litellm is not None:
        return _litellm
    with _lock:
        if _litellm is not None:
            return _litellm
        # Never fetch the cost map from the internet at import.
        os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
        # litellm's own httpx handler for OpenAI-style endpoints instead of the openai
        # SDK, whose request building walks every message on every call: ~5x less CPU
        # per call with a long history. Set it to False to go back to the SDK.
        os.environ.setdefault("EXPERIMENTAL_OPENAI_BASE_LLM_HTTP_HANDLER", "True")
        import atexit
        import gc

        import litellm

        from ..execution.engine_loop import stop_engine_loop

        atexit.register(stop_engine_loop)  # runs before litellm's exit handler (registered at its import)
        litellm.suppress_debug_info = True
        litellm.telemetry = False
        litellm.drop_params = True
        # The import leaves ~300,000 objects that live as long as the process (and no
        # garbage: a collection right after it finds none); every full collection
        # walked them all, ~0.2 s with the engine loop stalled, every few hundred
        # sub-calls. Set them aside for good so that later passes see newer objects only.
        gc.freeze()
        _litellm = litellm
    return _litellm


__all__ = ["litellm_loaded", "load_in_background", "load_litellm"]
