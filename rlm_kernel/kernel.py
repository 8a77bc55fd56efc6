"""The RLM kernel: an IPython kernel with the ``%rlm`` magics loaded."""

from __future__ import annotations

from typing import Any

from ipykernel.ipkernel import IPythonKernel

from . import __version__


class RLMKernel(IPythonKernel):
    implementation = "rlm_kernel"
    implementation_version = __version__
    banner = (
        "RLM (Python 3): a Recursive Language Model workspace.\n"
        "%rlm context PATH loads the input as `context`; a %%rlm cell asks a question about it."
    )

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        from .magics import load_ipython_extension

        load_ipython_extension(self.shell)
