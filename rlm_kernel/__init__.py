"""rlm-kernel: Recursive Language Models in a Jupyter notebook.

The huge input lives in the kernel as ``context``; a root model writes the
cells that inspect it and call sub-models on its slices.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._version import __version__

if TYPE_CHECKING:
    from .api import RLM, RLMResult
    from .context.files import load_documents as load_context

__all__ = ["RLM", "RLMResult", "__version__", "load_context", "load_ipython_extension"]


def __getattr__(name: str) -> Any:
    # Lazy: importing the package (the kernel does at start) must not pull in litellm.
    if name in ("RLM", "RLMResult"):
        from . import api

        return getattr(api, name)
    if name == "load_context":  # files, folders, archives, URLs as a context (rlm_kernel.context)
        from .context.files import load_documents

        return load_documents
    raise AttributeError(name)


def load_ipython_extension(ipython: Any) -> None:
    """``%load_ext rlm_kernel``: register the ``%rlm`` / ``%%rlm`` magics."""
    from .kernel.magics import load_ipython_extension as _load

    _load(ipython)


def unload_ipython_extension(ipython: Any) -> None:
    from .kernel.magics import unload_ipython_extension as _unload

    _unload(ipython)
