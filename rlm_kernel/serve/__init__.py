"""The RLM served as a model any OpenAI client can call.

- ``provider.py``: a litellm custom provider (``CustomLLM``) that runs an RLM
  per chat request; :func:`register` makes ``litellm.completion(model=
  "rlm/<root model>", ...)`` use it in this process.
- ``request.py``: how a request's messages become the context and the query.
- ``proxy.py``: ``rlm-kernel serve``, the real litellm proxy serving it.
"""

from __future__ import annotations

from typing import Any


def register(*, runs_dir: str = "rlm-runs", **options: Any) -> Any:
    """Register the ``rlm`` provider with litellm in this process and return
    its handler. ``options`` are run options every request uses (``model``
    is taken from the call's model name ``rlm/<root model>`` when left out);
    each request's trajectory notebook is written to ``runs_dir``."""
    from ..engine.model.litellm_setup import load_litellm
    from .provider import PROVIDER, ServeSettings, handler

    litellm = load_litellm()
    made = handler(ServeSettings(runs_dir=runs_dir, options=options))
    others = [m for m in litellm.custom_provider_map if m.get("provider") != PROVIDER]
    litellm.custom_provider_map = [*others, {"provider": PROVIDER, "custom_handler": made}]
    litellm.utils.custom_llm_setup()
    return made


__all__ = ["register"]
