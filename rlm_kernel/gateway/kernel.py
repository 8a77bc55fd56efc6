"""The gateway-backed RLM kernel ("RLM (Python 3, on a Jupyter gateway)"):
the kernel the page talks to holds the engine (and the model keys); every
cell, the person's and the agent's, runs in one kernel that a Jupyter
gateway started, behind it. It is the sandboxed kernel's forwarding
(``sandbox/forwarding.py``: outputs, widgets, ``input()``, Interrupt) with the
gateway as the home of that kernel. The gateway comes from the environment
the kernel starts in: ``$RLM_GATEWAY_URL``, ``$RLM_GATEWAY_TOKEN`` (or
``$JUPYTER_GATEWAY_AUTH_TOKEN``), ``$RLM_GATEWAY_KERNEL`` (set them for the
Jupyter server, or in this kernelspec's ``env``).
"""

from __future__ import annotations

from typing import Any

from .._deferred_grammar import defer_iri_grammar
from ..sandbox.forwarding import SandboxedRLMKernel
from .client import token_from_env
from .home import DEFAULT_KERNEL, GatewaySpec


class GatewayRLMKernel(SandboxedRLMKernel):
    implementation = "rlm_kernel_gateway"
    banner = ("RLM (Python 3, on a Jupyter gateway): every cell runs in a kernel the gateway at $RLM_GATEWAY_URL "
              "starts; sub-calls and model keys stay in this kernel.")

    def confined_spec(self, options: Any) -> GatewaySpec:
        # checked at the first cell, not here: a kernel that cannot start says nothing to the page
        return GatewaySpec(options.gateway_url or "", options.gateway_kernel or DEFAULT_KERNEL,
                           options.gateway_token or token_from_env(), lazy=True)


def main() -> None:
    from ipykernel.kernelapp import IPKernelApp

    defer_iri_grammar()
    IPKernelApp.launch_instance(kernel_class=GatewayRLMKernel)


if __name__ == "__main__":
    main()
