"""The server side of the live notebook: a Jupyter server extension that,
with real-time collaboration on (jupyter-collaboration), holds the kernel
end of the live protocol for every RLM kernel the server runs and writes
each run into the notebook's shared document, once, whether no page, one
page or many have the notebook open (DESIGN principle 10). Pages only show
it. Without collaboration it does nothing: each page keeps its own copy and
writes it (docs/live-protocol.md, "Who writes").

Enabled by ``jupyter_server_config.d/rlm_kernel.json``, which the wheel
installs. Imports nothing of ours but ``live_protocol`` (the Jupyter
server process need not load the engine).
"""

from __future__ import annotations

from typing import Any


def _jupyter_server_extension_points() -> list[dict[str, Any]]:
    return [{"module": "rlm_kernel.server"}]


def _load_jupyter_server_extension(serverapp: Any) -> None:
    from .kernels import KernelWatch

    watch = KernelWatch(serverapp)
    serverapp.web_app.settings["rlm_kernel_watch"] = watch
    watch.start()
    serverapp.log.info("rlm-kernel | the server writes RLM runs into shared notebooks when collaboration is on")
